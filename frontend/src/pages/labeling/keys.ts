// The keyboard: frame labels by holding c (success) or a (fail) while moving, window labels 1-3, proposals,
// undo, navigation and playback. The key list for people is the help dialog in episode_label.html.
import type { Navigator } from "./navigation";
import type { Proposals } from "./proposals";
import type { Renderer } from "./render";
import type { FrameValue, LabelingState } from "./state";
import type { Writer } from "./writes";

export interface KeyTargets {
  help: HTMLDialogElement;
  autoBox: HTMLInputElement;
  historyPanel: HTMLDetailsElement;
  /** The project whose labeling queue opened this page (0: not opened from the queue). */
  fromQueue: number;
}

export class Keys {
  // while a label key is held: the old values of the frames it labeled, and how many frames it passed
  private holdOlds: Map<number, string | null> | null = null;
  private holdCount = 0;

  constructor(
    private readonly s: LabelingState,
    private readonly r: Renderer,
    private readonly w: Writer,
    private readonly proposals: Proposals,
    private readonly nav: Navigator,
    private readonly targets: KeyTargets,
  ) {}

  holdLabel(positions: number[]): void {
    const held = this.s.view.held;
    if (!held || !this.holdOlds) return;
    this.holdCount += positions.length;
    const olds = this.w.labelFrames(positions, held, false);
    for (const [p, old] of olds) if (!this.holdOlds.has(p)) this.holdOlds.set(p, old);
  }

  /** Labels the selection at once, or else starts holding `value` at the cursor. */
  startHold(value: FrameValue): void {
    const sel = this.s.selection();
    if (sel) {
      const positions = Array.from({ length: sel[1] - sel[0] + 1 }, (_, k) => sel[0] + k);
      this.w.labelFrames(positions, value);
      return;
    }
    this.s.view.held = value;
    this.holdOlds = new Map();
    this.holdCount = 0;
    this.holdLabel([this.s.view.cursor]);
  }

  /** Ends a hold: one undo entry for all it labeled; auto-advance after a single frame. */
  readonly endHold = (): void => {
    const view = this.s.view;
    if (!view.held || !this.holdOlds) return;
    const value = view.held;
    const olds = [...this.holdOlds.entries()];
    view.held = null;
    this.holdOlds = null;
    this.w.flushFrames();
    if (olds.length) this.w.recordFrames(`${value} ×${olds.length}`, olds, value);
    if (view.autoAdvance && !view.playing && this.holdCount === 1) this.nav.move(view.cursor + 1);
  };

  clearHere(): void {
    const view = this.s.view;
    const sel = this.s.selection();
    const positions = sel ? Array.from({ length: sel[1] - sel[0] + 1 }, (_, k) => sel[0] + k) : [view.cursor];
    this.w.labelFrames(positions, null);
    if (!sel && view.autoAdvance && !view.playing) this.nav.move(view.cursor + 1);
  }

  readonly onKeyDown = (event: KeyboardEvent): void => {
    const { s, r, w, nav, proposals } = this;
    const { help, autoBox, historyPanel, fromQueue } = this.targets;
    const view = s.view;
    const target = event.target as HTMLElement;
    if (target.closest("input:not([type=checkbox]), textarea, select")) return;
    if (help.open) {
      if (event.key === "?" || event.key === "Escape") {
        help.close();
        event.preventDefault();
      }
      return;
    }
    const key = event.key;
    if (event.ctrlKey || event.metaKey) {
      if (key.toLowerCase() === "z") {
        event.preventDefault();
        w.undoOrRedo(event.shiftKey);
      } else if (key.toLowerCase() === "y") {
        event.preventDefault();
        w.undoOrRedo(true);
      }
      return;
    }
    if (event.altKey) return;
    const repeat = event.repeat;
    let handled = true;
    switch (key) {
      case " ":
        if (!repeat) nav.setPlaying(!view.playing);
        break;
      case "ArrowRight":
      case "ArrowLeft": {
        const step = (key === "ArrowRight" ? 1 : -1) * (event.shiftKey ? 10 : 1);
        nav.move(view.cursor + step, { select: event.shiftKey });
        break;
      }
      case "Home":
        nav.move(0);
        break;
      case "End":
        nav.move(s.n - 1);
        break;
      case "c":
      case "C":
      case "a":
      case "A":
        if (!repeat && !view.held) this.startHold(key.toLowerCase() === "c" ? "success" : "fail");
        break;
      case "x":
      case "X":
        if (!repeat) this.clearHere();
        break;
      case "1":
      case "2":
      case "3":
        if (!repeat) w.labelWindow((["positive", "negative", "unclear"] as const)[Number(key) - 1]);
        break;
      case "0":
      case "Backspace":
      case "Delete":
        if (!repeat) w.labelWindow(null);
        break;
      case "]":
        nav.move(view.cursor + s.stride);
        break;
      case "[":
        nav.move(view.cursor - s.stride);
        break;
      case "n":
      case "N": {
        if (key === "n" && fromQueue) {
          // opened from the labeling queue: save, then go to the next most valuable frame
          w.flushFrames();
          void w.queue.run(async () => undefined).then(() => location.assign(`/projects/${fromQueue}/label-next`));
          break;
        }
        const found = s.findFrom(view.cursor, key === "n" ? 1 : -1, (p) => s.model.human[p] === null);
        if (found === null) r.flash("No unlabeled step that way");
        else nav.move(found);
        break;
      }
      case "p":
      case "P": {
        const found = s.findFrom(view.cursor, key === "p" ? 1 : -1, (p) => s.proposalRunStart(p));
        if (found === null) r.flash("No open proposal that way");
        else nav.move(found);
        break;
      }
      case "y":
        if (!repeat) proposals.decide("accept", proposals.here());
        break;
      case "Y":
        if (!repeat) proposals.decide("accept", proposals.episode());
        break;
      case "r":
        if (!repeat) proposals.decide("reject", proposals.here());
        break;
      case "R":
        if (!repeat) proposals.decide("reject", proposals.episode());
        break;
      case "z":
        if (!repeat) w.undoOrRedo(false);
        break;
      case "Z":
        if (!repeat) w.undoOrRedo(true);
        break;
      case "t":
        if (!repeat) {
          view.autoAdvance = !view.autoAdvance;
          autoBox.checked = view.autoAdvance;
          r.flash(`Auto-advance ${view.autoAdvance ? "on" : "off"}`);
        }
        break;
      case "?":
        help.showModal();
        break;
      case "h":
        if (!repeat) historyPanel.open = !historyPanel.open;
        break;
      case "Escape":
        view.anchor = null;
        r.render();
        break;
      default:
        handled = false;
    }
    if (handled) event.preventDefault();
  };

  readonly onKeyUp = (event: KeyboardEvent): void => {
    const key = event.key.toLowerCase();
    const held = this.s.view.held;
    if ((key === "c" && held === "success") || (key === "a" && held === "fail")) this.endHold();
  };
}
