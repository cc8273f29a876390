// The episode timeline: a reward curve, a frame-label track (human labels above, proposals below,
// hatched) and a window track (human windows above, proposals below), one column per step.
import { cssVar } from "./chart_theme";

export interface WindowMark {
  start: number; // positions (0-based step order)
  end: number;
  value: string;
  source: string; // human | proposal
  status: string;
}

export interface TimelineModel {
  length: number;
  reward: number[];
  human: (string | null)[];
  proposal: (string | null)[];
  proposalStatus: (string | null)[];
  windows: WindowMark[];
}

export const COLORS: Record<string, string> = {
  success: "#1f9d55",
  fail: "#d64545",
  positive: "#1f9d55",
  negative: "#d64545",
  unclear: "#8a8fa0",
};

const CURVE_H = 64;
const FRAME_HUMAN_H = 16;
const FRAME_PROPOSAL_H = 8;
const GAP = 4;
const LANE_H = 5;
const LANES = 5;

export const TRACKS = {
  curve: [0, CURVE_H],
  frames: [CURVE_H + GAP, CURVE_H + GAP + FRAME_HUMAN_H + FRAME_PROPOSAL_H + 2],
  windows: [
    CURVE_H + 2 * GAP + FRAME_HUMAN_H + FRAME_PROPOSAL_H + 2,
    CURVE_H + 2 * GAP + FRAME_HUMAN_H + FRAME_PROPOSAL_H + 2 + 2 * LANES * LANE_H + 3,
  ],
};
export const TIMELINE_HEIGHT = TRACKS.windows[1] + 2;

function hatch(ctx: CanvasRenderingContext2D, color: string): CanvasPattern | string {
  const tile = document.createElement("canvas");
  tile.width = tile.height = 6;
  const t = tile.getContext("2d");
  if (!t) return color;
  t.fillStyle = color;
  t.globalAlpha = 0.35;
  t.fillRect(0, 0, 6, 6);
  t.globalAlpha = 1;
  t.strokeStyle = color;
  t.lineWidth = 2;
  t.beginPath();
  t.moveTo(0, 6);
  t.lineTo(6, 0);
  t.stroke();
  return ctx.createPattern(tile, "repeat") ?? color;
}

/** Greedy lane packing so overlapping windows stay visible (one lane per overlap level). */
function lanes(windows: WindowMark[]): number[] {
  const ends: number[] = [];
  return windows.map((w) => {
    let lane = ends.findIndex((end) => end < w.start);
    if (lane < 0) {
      lane = ends.length;
      ends.push(w.end);
    } else ends[lane] = w.end;
    return lane % LANES;
  });
}

/** The fewest steps a zoomed timeline shows (or the whole episode, when shorter). */
export const MIN_VISIBLE_STEPS = 20;

/** The part of an episode the timeline shows: `start` and `length` in positions, within [0, total). */
export interface TimelineView {
  start: number;
  length: number;
}

/** `view` zoomed by `factor` (>1: in) around `anchor`, which stays where it was on screen. */
export function zoomView(view: TimelineView, total: number, factor: number, anchor: number): TimelineView {
  const length = Math.round(Math.min(total, Math.max(Math.min(MIN_VISIBLE_STEPS, total), view.length / factor)));
  const fraction = view.length ? (anchor - view.start) / view.length : 0;
  return clampView({ start: Math.round(anchor - fraction * length), length }, total);
}

export function clampView(view: TimelineView, total: number): TimelineView {
  const length = Math.max(1, Math.min(total, view.length));
  return { start: Math.max(0, Math.min(total - length, view.start)), length };
}

/** The view moved just enough to show `position` (a page at a time when it runs off an edge). */
export function followView(view: TimelineView, total: number, position: number): TimelineView {
  if (position >= view.start && position < view.start + view.length) return view;
  const start = position < view.start ? position - view.length + 1 : position;
  return clampView({ start, length: view.length }, total);
}

export class Timeline {
  private base: HTMLCanvasElement;
  private width = 0;
  private patterns: Record<string, CanvasPattern | string> = {};
  /** What is shown: the whole episode until zoomed. */
  view: TimelineView;

  constructor(private canvas: HTMLCanvasElement, private model: TimelineModel) {
    this.base = document.createElement("canvas");
    this.view = { start: 0, length: Math.max(1, model.length) };
    this.resize();
  }

  /** Shows `view` (clamped to the episode); true when that changed what is shown. */
  setView(view: TimelineView): boolean {
    const next = clampView(view, Math.max(1, this.model.length));
    if (next.start === this.view.start && next.length === this.view.length) return false;
    this.view = next;
    this.redrawBase();
    return true;
  }

  zoom(factor: number, anchor: number): boolean {
    return this.setView(zoomView(this.view, Math.max(1, this.model.length), factor, anchor));
  }

  follow(position: number): boolean {
    return this.setView(followView(this.view, Math.max(1, this.model.length), position));
  }

  get zoomed(): boolean {
    return this.view.length < this.model.length;
  }

  private get cell(): number {
    return this.width / Math.max(1, this.view.length);
  }

  resize(): void {
    const ratio = window.devicePixelRatio || 1;
    this.width = this.canvas.clientWidth || 800;
    for (const c of [this.canvas, this.base]) {
      c.width = Math.round(this.width * ratio);
      c.height = Math.round(TIMELINE_HEIGHT * ratio);
    }
    this.canvas.style.height = `${TIMELINE_HEIGHT}px`;
    this.redrawBase();
  }

  x(position: number): number {
    return (position - this.view.start) * this.cell;
  }

  positionAt(clientX: number): number {
    const rect = this.canvas.getBoundingClientRect();
    const p = this.view.start + Math.floor(((clientX - rect.left) / rect.width) * this.view.length);
    return Math.max(0, Math.min(this.model.length - 1, p));
  }

  /** Redraws the label and curve layers (after labels change). */
  redrawBase(): void {
    const ctx = this.base.getContext("2d");
    if (!ctx) return;
    const ratio = this.base.width / Math.max(1, this.width);
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, this.width, TIMELINE_HEIGHT);
    for (const key of ["success", "fail", "positive", "negative", "unclear"]) {
      this.patterns[key] ??= hatch(ctx, COLORS[key]);
    }
    const m = this.model;
    const cell = this.cell;
    // backgrounds
    ctx.fillStyle = cssVar("--sunken", "#f3f4f7");
    ctx.fillRect(0, TRACKS.curve[0], this.width, CURVE_H);
    ctx.fillRect(0, TRACKS.frames[0], this.width, TRACKS.frames[1] - TRACKS.frames[0]);
    ctx.fillRect(0, TRACKS.windows[0], this.width, TRACKS.windows[1] - TRACKS.windows[0]);
    // the tracks in step positions, shifted to the view (what falls outside the canvas is clipped)
    ctx.save();
    ctx.translate(-this.view.start * cell, 0);
    // frame labels
    const top = TRACKS.frames[0];
    for (let i = 0; i < m.length; i++) {
      const x = i * cell;
      const w = Math.max(cell - (cell > 4 ? 1 : 0), 1);
      const h = m.human[i];
      if (h) {
        ctx.fillStyle = COLORS[h];
        ctx.fillRect(x, top, w, FRAME_HUMAN_H);
      }
      const p = m.proposal[i];
      if (p && m.proposalStatus[i] !== "rejected") {
        ctx.fillStyle = this.patterns[p];
        ctx.globalAlpha = m.proposalStatus[i] === "accepted" ? 0.45 : 1;
        ctx.fillRect(x, top + FRAME_HUMAN_H + 2, w, FRAME_PROPOSAL_H);
        ctx.globalAlpha = 1;
      }
    }
    // windows: human lanes on top, proposals (hatched) below
    const human = m.windows.filter((w) => w.source === "human");
    const proposed = m.windows.filter((w) => w.source !== "human" && w.status !== "rejected");
    const draw = (list: WindowMark[], y0: number, solid: boolean) => {
      const laneOf = lanes(list);
      list.forEach((w, k) => {
        const x = w.start * cell;
        const width = Math.max((w.end - w.start + 1) * cell - 1, 1);
        const y = y0 + laneOf[k] * LANE_H;
        ctx.fillStyle = solid ? COLORS[w.value] : this.patterns[w.value];
        ctx.globalAlpha = !solid && w.status === "accepted" ? 0.45 : 1;
        ctx.fillRect(x, y, width, LANE_H - 1);
        ctx.globalAlpha = 1;
      });
    };
    draw(human, TRACKS.windows[0] + 1, true);
    draw(proposed, TRACKS.windows[0] + 2 + LANES * LANE_H, false);
    // reward curve, scaled to the steps shown
    const values = m.reward;
    const shown = values.slice(this.view.start, this.view.start + this.view.length);
    if (shown.length) {
      let lo = Math.min(...shown);
      let hi = Math.max(...shown);
      if (hi - lo < 1e-9) {
        hi += 0.5;
        lo -= 0.5;
      }
      const y = (v: number) => TRACKS.curve[0] + 4 + (1 - (v - lo) / (hi - lo)) * (CURVE_H - 8);
      if (lo < 0 && hi > 0) {
        ctx.strokeStyle = cssVar("--line", "#c9cdd6");
        ctx.beginPath();
        ctx.moveTo(this.view.start * cell, y(0));
        ctx.lineTo(this.view.start * cell + this.width, y(0));
        ctx.stroke();
      }
      ctx.strokeStyle = cssVar("--accent", "#3b6df0");
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      values.forEach((v, i) => {
        const px = (i + 0.5) * cell;
        if (i === 0) ctx.moveTo(px, y(v));
        else ctx.lineTo(px, y(v));
      });
      ctx.stroke();
      ctx.restore();
      ctx.fillStyle = cssVar("--muted", "#667085");
      ctx.font = "10px system-ui, sans-serif";
      ctx.fillText(`reward ${hi.toFixed(2)}`, 4, TRACKS.curve[0] + 11);
      ctx.fillText(lo.toFixed(2), 4, TRACKS.curve[0] + CURVE_H - 3);
    } else ctx.restore();
  }

  /** Composes the base layer with the cursor, selection and current window. */
  draw(cursor: number, selection: [number, number] | null, windowSpan: [number, number] | null): void {
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    const ratio = this.canvas.width / Math.max(1, this.width);
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.drawImage(this.base, 0, 0);
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    const cell = this.cell;
    ctx.translate(-this.view.start * cell, 0);
    if (selection) {
      ctx.fillStyle = "rgba(59, 109, 240, 0.18)";
      ctx.fillRect(selection[0] * cell, 0, (selection[1] - selection[0] + 1) * cell, TIMELINE_HEIGHT);
    }
    if (windowSpan) {
      ctx.strokeStyle = cssVar("--text", "#1d2330");
      ctx.lineWidth = 1.5;
      ctx.strokeRect(
        windowSpan[0] * cell + 0.75,
        TRACKS.windows[0] + 0.75,
        Math.max((windowSpan[1] - windowSpan[0] + 1) * cell - 1.5, 2),
        TRACKS.windows[1] - TRACKS.windows[0] - 1.5,
      );
    }
    ctx.fillStyle = cssVar("--text", "#1d2330");
    ctx.fillRect(cursor * cell + cell / 2 - 1, 0, 2, TIMELINE_HEIGHT);
  }
}
