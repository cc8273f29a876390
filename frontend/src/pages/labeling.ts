// The episode labeling page: camera views, a timeline with label tracks and the reward curve,
// keyboard-first frame and window labeling, proposals, undo/redo. Every change is saved at once.
// This file wires the parts in labeling/ together: state, render, writes, proposals, navigation, keys.
import { pageData } from "../lib/api";
import { COLORS } from "../lib/timeline";
import { historyShow } from "./labeling/history";
import { Keys } from "./labeling/keys";
import { Navigator } from "./labeling/navigation";
import { Proposals } from "./labeling/proposals";
import { $, type Probe, Renderer } from "./labeling/render";
import { type FrameValue, LabelingState, type WindowValue } from "./labeling/state";
import { Writer } from "./labeling/writes";

const s = new LabelingState(pageData("labeling"));
const timelineCanvas = $<HTMLCanvasElement>("timeline");
const playButton = $<HTMLButtonElement>("play");
const fpsSelect = $<HTMLSelectElement>("fps");
const autoBox = $<HTMLInputElement>("auto-advance");
const help = $<HTMLDialogElement>("help");
const historyPanel = $<HTMLDetailsElement>("history");
const params = new URLSearchParams(location.search);
const fromQueue = Number(params.get("queue")) || 0; // project of the labeling queue

const r = new Renderer(s, timelineCanvas);
(window as unknown as { __rs: Probe }).__rs = r.probe;
const nav = new Navigator(s, r, playButton, (passed) => keys.holdLabel(passed));
const w = new Writer(s, r, $("save-status"), (to) => nav.move(to));
const proposals = new Proposals(s, r, w);
const keys = new Keys(s, r, w, proposals, nav, { help, autoBox, historyPanel, fromQueue });

document.addEventListener("keydown", keys.onKeyDown);
document.addEventListener("keyup", keys.onKeyUp);
window.addEventListener("blur", keys.endHold);

// ---- mouse and buttons -----------------------------------------------------------------------
let dragging: { select: boolean } | null = null;
timelineCanvas.addEventListener("mousedown", (event) => {
  dragging = { select: event.shiftKey };
  nav.move(r.timeline.positionAt(event.clientX), { select: event.shiftKey });
  event.preventDefault();
});
window.addEventListener("mousemove", (event) => {
  if (dragging) nav.move(r.timeline.positionAt(event.clientX), { select: dragging.select });
});
window.addEventListener("mouseup", () => {
  dragging = null;
});
// ---- timeline zoom: ctrl+wheel (or a pinch) at the pointer, + and - keys and buttons at the cursor ------------
const ZOOM_STEP = 2;
function zoom(factor: number, anchor = s.view.cursor): void {
  if (r.timeline.zoom(factor, anchor)) r.drawTimeline();
}
timelineCanvas.addEventListener(
  "wheel",
  (event) => {
    if (event.ctrlKey || event.metaKey) {
      zoom(event.deltaY < 0 ? ZOOM_STEP : 1 / ZOOM_STEP, r.timeline.positionAt(event.clientX));
    } else if (Math.abs(event.deltaX) > Math.abs(event.deltaY) && r.timeline.zoomed) {
      const { start, length } = r.timeline.view;
      const steps = Math.sign(event.deltaX) * Math.max(1, Math.round(length / 10));
      if (r.timeline.setView({ start: start + steps, length })) r.drawTimeline();
    } else return; // a plain vertical wheel scrolls the page
    event.preventDefault();
  },
  { passive: false },
);
$("zoom-in").addEventListener("click", () => zoom(ZOOM_STEP));
$("zoom-out").addEventListener("click", () => zoom(1 / ZOOM_STEP));
$("zoom-fit").addEventListener("click", () => zoom(0));
document.addEventListener("keydown", (event) => {
  const target = event.target as HTMLElement | null;
  if (event.ctrlKey || event.metaKey || event.altKey || target?.closest("input, select, textarea")) return;
  if (event.key === "+" || event.key === "=") zoom(ZOOM_STEP);
  else if (event.key === "-") zoom(1 / ZOOM_STEP);
});
window.addEventListener("resize", () => {
  r.timeline.resize();
  r.drawTimeline();
});

playButton.addEventListener("click", () => nav.setPlaying(!s.view.playing));
// Form controls give the focus back at once, so the keyboard keeps driving the page.
fpsSelect.addEventListener("change", () => {
  s.view.fps = Number(fpsSelect.value) || 10;
  fpsSelect.blur();
});
autoBox.addEventListener("change", () => {
  s.view.autoAdvance = autoBox.checked;
  autoBox.blur();
});
historyPanel.addEventListener("toggle", () => {
  if (historyPanel.open) w.queue.run(() => historyShow(s.episodeApi, $("history-rows"), $<HTMLButtonElement>("history-more"))).catch(w.failed);
});
for (const button of document.querySelectorAll<HTMLButtonElement>("[data-frame]")) {
  button.addEventListener("click", () => {
    const value = button.dataset.frame as FrameValue | "";
    if (value) {
      keys.startHold(value);
      keys.endHold();
    } else keys.clearHere();
  });
}
for (const button of document.querySelectorAll<HTMLButtonElement>("[data-window]")) {
  button.addEventListener("click", () => w.labelWindow((button.dataset.window || null) as WindowValue | null));
}
$("accept-here").addEventListener("click", () => proposals.decide("accept", proposals.here()));
$("accept-episode").addEventListener("click", () => proposals.decide("accept", proposals.episode()));
$("reject-here").addEventListener("click", () => proposals.decide("reject", proposals.here()));
$("generate").addEventListener("click", () => proposals.generate());
$("undo").addEventListener("click", () => w.undoOrRedo(false));
$("redo").addEventListener("click", () => w.undoOrRedo(true));
$("help-button").addEventListener("click", () => help.showModal());
// Buttons must not keep focus, or space would press them again instead of playing.
for (const button of document.querySelectorAll<HTMLButtonElement>("#labeler button, .label-head button")) {
  button.addEventListener("mouseup", () => button.blur());
}
window.addEventListener("beforeunload", (event) => {
  w.flushFrames(true);
  if (w.queue.busy) event.preventDefault();
});

// ---- start -----------------------------------------------------------------------------------
r.store.onLoad((_camera, position) => r.frameLoaded(position));
s.view.cursor = s.positionOf.get(Number(params.get("step"))) ?? 0;
for (const [value, color] of Object.entries(COLORS)) document.documentElement.style.setProperty(`--label-${value}`, color);
if (s.n === 0) r.empty();
else {
  r.render();
  // An episode nobody has generated proposals for gets them on first open (existing ones are never redone here).
  if (!s.hasProposals() && s.data.episode.status === "finished") void proposals.generate();
}
