// One reconnecting WebSocket for every page: JSON messages in, exponential backoff after a drop, and
// close codes after which trying again is pointless (not allowed, no such object) stop it for good.

export interface SocketOptions {
  onMessage: (msg: any) => void;
  onOpen?: () => void;
  // retryInMs is null when the socket gives up (a final close code)
  onClose?: (event: CloseEvent, retryInMs: number | null) => void;
  finalCodes?: number[];
  firstDelayMs?: number;
  maxDelayMs?: number;
}

export interface ReconnectingSocket {
  readonly reconnects: number;
  send(data: unknown): boolean;
  close(): void;
}

export function wsUrl(path: string): string {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
}

export function reconnectingSocket(path: string, opts: SocketOptions): ReconnectingSocket {
  const first = opts.firstDelayMs ?? 500;
  const max = opts.maxDelayMs ?? 10_000;
  const final = new Set(opts.finalCodes ?? [4401, 4403, 4404]);
  let delay = first;
  let reconnects = 0;
  let stopped = false;
  let socket: WebSocket | null = null;
  let timer: number | undefined;

  function open(): void {
    socket = new WebSocket(wsUrl(path));
    socket.onopen = () => {
      delay = first;
      opts.onOpen?.();
    };
    socket.onmessage = (event) => opts.onMessage(JSON.parse(event.data));
    socket.onclose = (event) => {
      if (stopped || final.has(event.code)) {
        opts.onClose?.(event, null);
        return;
      }
      const wait = delay;
      opts.onClose?.(event, wait);
      reconnects++;
      timer = window.setTimeout(open, wait);
      delay = Math.min(delay * 2, max);
    };
  }
  open();
  return {
    get reconnects() {
      return reconnects;
    },
    send(data: unknown): boolean {
      if (!socket || socket.readyState !== WebSocket.OPEN) return false;
      socket.send(typeof data === "string" ? data : JSON.stringify(data));
      return true;
    },
    close(): void {
      stopped = true;
      window.clearTimeout(timer);
      socket?.close();
    },
  };
}
