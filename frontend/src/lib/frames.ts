// Background prefetch of an episode's frames: every image is fetched and decoded once, nearest to the
// cursor first, with a few requests in flight, so stepping through the episode never waits on the network.

export type FrameListener = (camera: number, position: number) => void;

export class FrameStore {
  private images: (HTMLImageElement | null)[][];
  private started: Uint8Array[];
  private inFlight = 0;
  private focus = 0;
  private pending = 0;
  private listeners: FrameListener[] = [];
  readonly loaded: number[];

  constructor(private urls: (string | null)[][], private concurrency = 8) {
    this.images = urls.map((list) => list.map(() => null));
    this.started = urls.map((list) => new Uint8Array(list.length));
    this.loaded = urls.map(() => 0);
    this.pending = urls.reduce((n, list) => n + list.filter(Boolean).length, 0);
  }

  get length(): number {
    return this.urls[0]?.length ?? 0;
  }

  get complete(): boolean {
    return this.pending === 0;
  }

  onLoad(listener: FrameListener): void {
    this.listeners.push(listener);
  }

  /** A decoded image, or null while it is still on its way. */
  get(camera: number, position: number): HTMLImageElement | null {
    return this.images[camera]?.[position] ?? null;
  }

  /** Moves the prefetch focus (nearest frames load first) and keeps the pipeline full. */
  setFocus(position: number): void {
    this.focus = position;
    this.pump();
  }

  private next(): [number, number] | null {
    const n = this.length;
    for (let d = 0; d < n; d++) {
      for (const p of d === 0 ? [this.focus] : [this.focus + d, this.focus - d]) {
        if (p < 0 || p >= n) continue;
        for (let c = 0; c < this.urls.length; c++) {
          if (!this.started[c][p] && this.urls[c][p]) return [c, p];
        }
      }
    }
    return null;
  }

  private pump(): void {
    while (this.inFlight < this.concurrency) {
      const job = this.next();
      if (!job) return;
      const [camera, position] = job;
      this.started[camera][position] = 1;
      this.inFlight++;
      this.load(camera, position).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async load(camera: number, position: number): Promise<void> {
    const image = new Image();
    image.decoding = "async";
    image.src = this.urls[camera][position] as string;
    try {
      await image.decode();
    } catch {
      this.pending--;
      return; // a broken frame stays empty; the view says so
    }
    this.images[camera][position] = image;
    this.loaded[camera]++;
    this.pending--;
    for (const listener of this.listeners) listener(camera, position);
  }
}
