// Small pure helpers for live numbers: an event rate over a sliding window and exponential smoothing.

// Events per second over the last `windowS` seconds; 0 when the newest event is older than `staleS`.
// Times are in seconds; pass the producer's own timestamps when there are any, so bursts on the way
// (network, a busy server) do not distort the rate.
export class RateMeter {
  private times: number[] = [];
  constructor(private windowS = 5, private staleS = 2) {}

  add(t: number): void {
    const last = this.times[this.times.length - 1];
    if (last !== undefined && t < last) this.times = []; // the producer's clock restarted: start over
    this.times.push(t);
    while (this.times.length > 2 && this.times[0] < t - this.windowS) this.times.shift();
  }

  rate(now: number, lastArrival: number): number {
    const n = this.times.length;
    if (n < 2 || now - lastArrival > this.staleS) return 0;
    const span = this.times[n - 1] - this.times[0];
    return span > 0 ? (n - 1) / span : 0;
  }
}

// Exponential moving average; `alpha` in (0, 1], 1 = no smoothing. Starts at the first value.
export function ema(previous: number | null, value: number, alpha: number): number {
  return previous === null ? value : previous + alpha * (value - previous);
}
