// Moving through the episode: the cursor (optionally extending the selection) and playback at the chosen fps.
import type { Renderer } from "./render";
import type { LabelingState } from "./state";

export class Navigator {
  private lastTick = 0;

  constructor(
    private readonly s: LabelingState,
    private readonly r: Renderer,
    private readonly playButton: HTMLButtonElement,
    /** The positions the cursor passed while a label key is held (they get that label). */
    private readonly passedWhileHeld: (positions: number[]) => void,
  ) {}

  move(to: number, options: { select?: boolean } = {}): void {
    const view = this.s.view;
    const target = Math.max(0, Math.min(this.s.n - 1, to));
    if (options.select) view.anchor ??= view.cursor;
    else view.anchor = null;
    const from = view.cursor;
    view.cursor = target;
    if (view.held && target !== from) {
      const passed: number[] = [];
      const step = target > from ? 1 : -1;
      for (let p = from + step; p !== target + step; p += step) passed.push(p);
      this.passedWhileHeld(passed);
    }
    this.r.render();
  }

  setPlaying(on: boolean): void {
    const view = this.s.view;
    view.playing = on && this.s.n > 1;
    this.playButton.textContent = view.playing ? "❚❚ Pause" : "▶ Play";
    this.playButton.setAttribute("aria-label", view.playing ? "Pause" : "Play");
    if (view.playing) {
      if (view.cursor >= this.s.n - 1) this.move(0);
      this.lastTick = performance.now();
      requestAnimationFrame(this.tick);
    }
  }

  private readonly tick = (now: number): void => {
    const view = this.s.view;
    if (!view.playing) return;
    const interval = 1000 / view.fps;
    if (now - this.lastTick >= interval) {
      this.lastTick = now - ((now - this.lastTick) % interval);
      if (view.cursor >= this.s.n - 1) {
        this.setPlaying(false);
        return;
      }
      this.move(view.cursor + 1);
    }
    requestAnimationFrame(this.tick);
  };
}
