// Drawing the labeling page: camera views, the filmstrip of the current window, the timeline, the step and
// window panels, and short flash messages. Reads the state; never changes labels.
import { FrameStore } from "../../lib/frames";
import { Timeline } from "../../lib/timeline";
import type { LabelingState } from "./state";

export const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

/** What the browser tests and benches read (window.__rs): readiness, the last draw, the state and labels. */
export interface Probe {
  ready: number;
  lastDraw: { position: number; at: number };
  state: LabelingState["view"];
  model: LabelingState["model"];
  framesComplete: () => boolean;
}

const fmt = (v: unknown) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v));

export class Renderer {
  readonly store: FrameStore;
  readonly timeline: Timeline;
  readonly probe: Probe;
  private readonly stepInfo = $("step-info");
  private readonly views: { figure: HTMLElement; canvas: HTMLCanvasElement; ctx: CanvasRenderingContext2D }[];
  private readonly strip: HTMLCanvasElement[][];
  private flashTimer = 0;
  private readonly announcer = $("announcer");
  private announceTimer = 0;
  private lastAnnounced = "";
  private pendingFlash = "";
  private pendingStatus = "";

  constructor(private readonly s: LabelingState, private readonly timelineCanvas: HTMLCanvasElement) {
    const { cameras, n, data } = s;
    this.store = new FrameStore(
      `${s.episodeApi}/frames`,
      cameras,
      s.indexOf,
      cameras.map((c) => data.frames[c] ?? new Array(n).fill(null)),
    );
    const viewsEl = $("views");
    this.views = cameras.map((camera) => {
      const figure = document.createElement("figure");
      figure.className = "view loading";
      const canvas = document.createElement("canvas");
      canvas.dataset.camera = camera;
      canvas.setAttribute("role", "img");
      canvas.setAttribute("aria-label", `${camera} camera at the current step`);
      const caption = document.createElement("figcaption");
      caption.textContent = camera;
      figure.append(canvas, caption);
      viewsEl.append(figure);
      return { figure, canvas, ctx: canvas.getContext("2d") as CanvasRenderingContext2D };
    });
    const filmstrip = $("filmstrip");
    this.strip = cameras.map((camera) => {
      const row = document.createElement("div");
      row.className = "strip-row";
      const name = document.createElement("span");
      name.className = "strip-name";
      name.textContent = camera;
      row.append(name);
      const cells = Array.from({ length: s.windowSize }, () => {
        const canvas = document.createElement("canvas");
        canvas.className = "thumb";
        canvas.setAttribute("role", "img");
        canvas.setAttribute("aria-label", `${camera} camera, window frame ${row.childElementCount}`);
        row.append(canvas);
        return canvas;
      });
      filmstrip.append(row);
      return cells;
    });
    this.timeline = new Timeline(timelineCanvas, s.model);
    timelineCanvas.setAttribute("aria-valuemin", String(s.indexOf[0] ?? 0));
    timelineCanvas.setAttribute("aria-valuemax", String(s.indexOf[s.n - 1] ?? 0));
    const store = this.store;
    this.probe = { ready: 0, lastDraw: { position: -1, at: 0 }, state: s.view, model: s.model, framesComplete: () => store.complete };
  }

  render(): void {
    this.drawViews();
    this.drawTimeline();
    this.renderInfo();
    this.renderWindow();
    this.store.setFocus(this.s.view.cursor);
  }

  /** After labels changed: the timeline's label tracks, and the panels that show labels. */
  labelsChanged(): void {
    this.timeline.redrawBase();
    this.drawTimeline();
    this.renderInfo();
    this.renderWindow();
  }

  private followed = -1; // the step the timeline last followed

  drawTimeline(): void {
    // a zoomed timeline keeps the current step in sight when it moves (a zoom or pan away from it stays put)
    if (this.s.view.cursor !== this.followed) this.timeline.follow(this.s.view.cursor);
    this.followed = this.s.view.cursor;
    this.timeline.draw(this.s.view.cursor, this.s.selection(), this.s.windowSpan());
    const zoom = document.getElementById("zoom-text");
    if (zoom) {
      const { start, length } = this.timeline.view;
      const { indexOf } = this.s;
      zoom.textContent = this.timeline.zoomed
        ? `steps ${indexOf[start]}–${indexOf[start + length - 1]} of ${this.s.n}`
        : `all ${this.s.n} steps`;
    }
  }

  /** A frame arrived: redraw what shows it. */
  frameLoaded(position: number): void {
    if (position === this.s.view.cursor) this.drawViews();
    const span = this.s.windowSpan();
    if (span && position >= span[0] && position <= span[1]) this.renderWindow();
  }

  drawViews(): void {
    const cursor = this.s.view.cursor;
    let drawn = true;
    this.views.forEach((view, c) => {
      const image = this.store.get(c, cursor);
      if (!image) {
        view.figure.classList.add("loading");
        drawn = false;
        return;
      }
      if (view.canvas.width !== image.naturalWidth || view.canvas.height !== image.naturalHeight) {
        view.canvas.width = image.naturalWidth;
        view.canvas.height = image.naturalHeight;
      }
      view.ctx.drawImage(image, 0, 0);
      view.figure.classList.remove("loading");
    });
    if (drawn) {
      this.probe.lastDraw = { position: cursor, at: performance.now() };
      if (!this.probe.ready) {
        this.probe.ready = performance.now();
        document.body.dataset.ready = "1";
      }
    }
  }

  renderInfo(): void {
    const { data, model, indexOf, n } = this.s;
    const p = this.s.view.cursor;
    const human = model.human[p];
    const proposal = model.proposal[p];
    const action = data.steps.action[p];
    const score = data.steps.score[p];
    const selection = this.s.selection();
    this.stepInfo.innerHTML = `
    <span>Step <b id="step-number">${indexOf[p]}</b> <span class="muted">(${p + 1} / ${n})</span></span>
    <span>reward <b>${fmt(data.steps.reward[p])}</b>${score === null ? "" : ` · score <b>${fmt(score)}</b>`}</span>
    <span>env success <b class="${data.steps.success[p] ? "yes" : "no"}">${data.steps.success[p] ? "yes" : "no"}</b></span>
    <span class="action">action <code>${Array.isArray(action) ? `[${action.map(fmt).join(", ")}]` : fmt(action)}</code></span>
    <span>label <b id="frame-label" class="chip ${human ?? "none"}">${human ?? "none"}</b></span>
    <span>proposal <b class="chip proposal ${proposal ?? "none"}">${proposal ?? "none"}</b>${proposal ? ` <span class="muted">${model.proposalStatus[p]}</span>` : ""}</span>
    ${selection ? `<span class="selection">selected ${indexOf[selection[0]]}–${indexOf[selection[1]]}</span>` : ""}`;
    const status =
      `Step ${indexOf[p]}, ${p + 1} of ${n}. Label ${human ?? "none"}.` +
      (proposal ? ` Proposal ${proposal}, ${model.proposalStatus[p]}.` : "") +
      (selection ? ` Selected steps ${indexOf[selection[0]]} to ${indexOf[selection[1]]}.` : "");
    this.timelineCanvas.setAttribute("aria-valuenow", String(indexOf[p]));
    this.timelineCanvas.setAttribute("aria-valuetext", status);
    this.pendingStatus = status;
    this.announce();
  }

  /** Says the latest flash message and step status through the page's polite live region once the page
   * has settled for 0.4 s (playback and held keys would otherwise queue a sentence per frame); a status
   * already said is not repeated. */
  private announce(): void {
    window.clearTimeout(this.announceTimer);
    this.announceTimer = window.setTimeout(() => {
      const message = [this.pendingFlash, this.pendingStatus].filter(Boolean).join(" ");
      this.pendingFlash = "";
      if (message === this.lastAnnounced) return;
      this.lastAnnounced = message;
      this.announcer.textContent = message;
    }, 400);
  }

  renderWindow(): void {
    const { indexOf, windowSize, model } = this.s;
    const span = this.s.windowSpan();
    const spanEl = $("window-span");
    const labelsEl = $("window-labels");
    if (!span) {
      spanEl.textContent = `episode shorter than ${windowSize} steps`;
      labelsEl.textContent = "";
      return;
    }
    spanEl.textContent = `steps ${indexOf[span[0]]}–${indexOf[span[1]]}`;
    const human = this.s.humanWindow(span[0], span[1]);
    const proposal = model.windows.find((w) => w.source !== "human" && w.start === span[0] && w.end === span[1]);
    labelsEl.innerHTML =
      `human <b id="window-label" class="chip ${human?.value ?? "none"}">${human?.value ?? "none"}</b>` +
      (proposal
        ? ` · proposal <b class="chip proposal ${proposal.value}">${proposal.value}</b> <span class="muted">Δ ${fmt(proposal.score ?? 0)} ${proposal.status}</span>`
        : "");
    this.strip.forEach((cells, c) => {
      cells.forEach((canvas, k) => {
        const image = this.store.get(c, span[0] + k);
        const ctx = canvas.getContext("2d");
        if (!ctx) return;
        if (!image) {
          ctx.clearRect(0, 0, canvas.width, canvas.height);
          return;
        }
        if (canvas.width !== image.naturalWidth) {
          canvas.width = image.naturalWidth;
          canvas.height = image.naturalHeight;
        }
        ctx.drawImage(image, 0, 0);
      });
    });
  }

  /** A short message over the step panel (2.5 s). */
  flash(message: string): void {
    const el = this.stepInfo;
    el.dataset.flash = message;
    this.pendingFlash = message;
    this.announce();
    window.clearTimeout(this.flashTimer);
    this.flashTimer = window.setTimeout(() => delete el.dataset.flash, 2500);
  }

  /** The message when the episode has no steps (nothing else is drawn). */
  empty(): void {
    this.stepInfo.textContent = "This episode has no steps yet.";
  }
}
