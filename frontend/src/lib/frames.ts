// Background prefetch of an episode's frames. Frames arrive in bundles (one request returns up to
// `chunk` frames of one camera, see GET /api/episodes/<uuid>/frames), nearest to the cursor first,
// with a few requests in flight; each frame is decoded once, so stepping never waits on the network.
// The frame under the cursor is also fetched on its own when its bundle has not arrived yet.

export type FrameListener = (camera: number, position: number) => void;

const NONE = 0;
const STARTED = 1;
const DONE = 2;

function mimeOf(bytes: Uint8Array): string {
  return bytes[0] === 0xff && bytes[1] === 0xd8 ? "image/jpeg" : "image/png";
}

export class FrameStore {
  private images: (HTMLImageElement | null)[][];
  private chunks: Uint8Array[];
  private singles: Uint8Array[];
  private positionOf: Map<number, number>;
  private inFlight = 0;
  private focus = 0;
  private listeners: FrameListener[] = [];

  constructor(
    private bundleUrl: string,
    private cameras: string[],
    private steps: number[],
    private urls: (string | null)[][],
    private chunk = 50,
    private concurrency = 4,
  ) {
    const n = steps.length;
    const chunkCount = Math.ceil(n / chunk);
    this.images = cameras.map(() => new Array(n).fill(null));
    this.chunks = cameras.map(() => new Uint8Array(chunkCount));
    this.singles = cameras.map(() => new Uint8Array(n));
    this.positionOf = new Map(steps.map((index, position) => [index, position]));
  }

  get length(): number {
    return this.steps.length;
  }

  get complete(): boolean {
    return this.chunks.every((list) => list.every((s) => s === DONE));
  }

  onLoad(listener: FrameListener): void {
    this.listeners.push(listener);
  }

  /** A decoded image, or null while it is still on its way. */
  get(camera: number, position: number): HTMLImageElement | null {
    return this.images[camera]?.[position] ?? null;
  }

  /** Moves the prefetch focus (nearest frames load first) and keeps the pipeline full. The frames under the
   * cursor that are fetched on their own go first: bundles started beside them would share the server's CPU and
   * its store's with them (on the object store the page's first frame came 2-3 s late so). */
  setFocus(position: number): void {
    this.focus = position;
    const singles: Promise<void>[] = [];
    for (let c = 0; c < this.cameras.length; c++) {
      const k = Math.floor(position / this.chunk);
      if (!this.images[c][position] && this.chunks[c][k] !== DONE && !this.singles[c][position]) {
        singles.push(this.loadSingle(c, position));
      }
    }
    if (singles.length) void Promise.allSettled(singles).then(() => this.pump());
    else this.pump();
  }

  private next(): [number, number] | null {
    const count = this.chunks[0]?.length ?? 0;
    const home = Math.floor(this.focus / this.chunk);
    for (let d = 0; d < count; d++) {
      for (const k of d === 0 ? [home] : [home + d, home - d]) {
        if (k < 0 || k >= count) continue;
        for (let c = 0; c < this.cameras.length; c++) if (this.chunks[c][k] === NONE) return [c, k];
      }
    }
    return null;
  }

  private pump(): void {
    while (this.inFlight < this.concurrency) {
      const job = this.next();
      if (!job) return;
      const [camera, k] = job;
      this.chunks[camera][k] = STARTED;
      this.inFlight++;
      this.loadChunk(camera, k)
        .catch(() => this.loadChunkOneByOne(camera, k))
        .finally(() => {
          this.chunks[camera][k] = DONE;
          this.inFlight--;
          this.pump();
        });
    }
  }

  private async loadChunk(camera: number, k: number): Promise<void> {
    const first = k * this.chunk;
    const last = Math.min(this.length, first + this.chunk) - 1;
    const query = new URLSearchParams({
      camera: this.cameras[camera],
      start: String(this.steps[first]),
      end: String(this.steps[last]),
    });
    const response = await fetch(`${this.bundleUrl}?${query}`, { credentials: "same-origin" });
    if (!response.ok) throw new Error(`frames ${response.status}`);
    const steps = (response.headers.get("X-Frame-Steps") || "").split(",").filter(Boolean).map(Number);
    const lengths = (response.headers.get("X-Frame-Lengths") || "").split(",").filter(Boolean).map(Number);
    const buffer = new Uint8Array(await response.arrayBuffer());
    let offset = 0;
    const decodes: Promise<void>[] = [];
    steps.forEach((step, i) => {
      const bytes = buffer.subarray(offset, offset + lengths[i]);
      offset += lengths[i];
      const position = this.positionOf.get(step);
      if (position === undefined || this.images[camera][position]) return;
      const url = URL.createObjectURL(new Blob([bytes], { type: mimeOf(bytes) }));
      decodes.push(this.decode(camera, position, url));
    });
    await Promise.all(decodes);
  }

  private async loadChunkOneByOne(camera: number, k: number): Promise<void> {
    const first = k * this.chunk;
    const last = Math.min(this.length, first + this.chunk);
    for (let p = first; p < last; p++) if (!this.images[camera][p]) await this.loadSingle(camera, p);
  }

  private async loadSingle(camera: number, position: number): Promise<void> {
    const url = this.urls[camera]?.[position];
    this.singles[camera][position] = 1;
    if (url) await this.decode(camera, position, url);
  }

  private async decode(camera: number, position: number, url: string): Promise<void> {
    const image = new Image();
    image.src = url;
    try {
      await image.decode();
    } catch {
      return; // a broken frame stays empty; the view says so
    }
    if (this.images[camera][position]) return;
    this.images[camera][position] = image;
    for (const listener of this.listeners) listener(camera, position);
  }
}
