// The episode labeling page: camera views, a timeline with label tracks and the reward curve,
// keyboard-first frame and window labeling, proposals, undo/redo. Every change is saved at once.
import { ApiError, api, pageData } from "../lib/api";
import { FrameStore } from "../lib/frames";
import { COLORS, Timeline, type WindowMark } from "../lib/timeline";
import { SerialQueue, UndoStack } from "../lib/undo";

type FrameValue = "success" | "fail";
type WindowValue = "positive" | "negative" | "unclear";

interface WindowRow {
  start: number;
  end: number;
  value: string;
  source: string;
  status: string;
  score: number | null;
}

interface EpisodeData {
  episode: { uuid: string; source: string; env_id: string; success: boolean | null; status: string; num_steps: number };
  project: { id: number; name: string; cameras: string[]; window_size: number; stride: number };
  steps: { index: number[]; reward: number[]; score: (number | null)[]; success: boolean[]; action: unknown[] };
  frames: Record<string, (string | null)[]>;
  frame_labels: { human: (string | null)[]; proposal: (string | null)[]; proposal_status: (string | null)[] };
  windows: WindowRow[];
}

interface Decision {
  frames: number;
  windows: number;
  previous_frames: Record<string, { index: number; value: string | null }[]>;
  previous_windows: Record<string, { start: number; end: number; value: string | null }[]>;
}

const data = pageData<EpisodeData>();
const uuid = data.episode.uuid;
const projectApi = `/api/projects/${data.project.id}`;
const episodeApi = `/api/episodes/${uuid}`;
const cameras = data.project.cameras;
const indexOf = data.steps.index; // position -> step index
const positionOf = new Map(indexOf.map((index, position) => [index, position]));
const n = indexOf.length;
const windowSize = Math.max(1, data.project.window_size);
const stride = Math.max(1, data.project.stride);

// ---- model -----------------------------------------------------------------------------------
const model = {
  length: n,
  reward: data.steps.reward,
  human: [...data.frame_labels.human],
  proposal: [...data.frame_labels.proposal],
  proposalStatus: [...data.frame_labels.proposal_status],
  windows: [] as (WindowMark & { score: number | null })[],
};

function loadWindows(rows: WindowRow[]): void {
  model.windows = rows
    .filter((w) => positionOf.has(w.start) && positionOf.has(w.end))
    .map((w) => ({ ...w, start: positionOf.get(w.start)!, end: positionOf.get(w.end)! }));
}
loadWindows(data.windows);

const state = {
  cursor: 0,
  anchor: null as number | null,
  playing: false,
  fps: 10,
  held: null as FrameValue | null,
  autoAdvance: false,
};

// ---- elements --------------------------------------------------------------------------------
const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const viewsEl = $("views");
const stepInfo = $("step-info");
const saveStatus = $("save-status");
const timelineCanvas = $<HTMLCanvasElement>("timeline");
const filmstrip = $("filmstrip");
const help = $<HTMLDialogElement>("help");
const playButton = $<HTMLButtonElement>("play");
const fpsSelect = $<HTMLSelectElement>("fps");
const autoBox = $<HTMLInputElement>("auto-advance");

const store = new FrameStore(
  `${episodeApi}/frames`,
  cameras,
  indexOf,
  cameras.map((c) => data.frames[c] ?? new Array(n).fill(null)),
);
const views = cameras.map((camera) => {
  const figure = document.createElement("figure");
  figure.className = "view loading";
  const canvas = document.createElement("canvas");
  canvas.dataset.camera = camera;
  const caption = document.createElement("figcaption");
  caption.textContent = camera;
  figure.append(canvas, caption);
  viewsEl.append(figure);
  return { figure, canvas, ctx: canvas.getContext("2d") as CanvasRenderingContext2D };
});
const strip = cameras.map((camera) => {
  const row = document.createElement("div");
  row.className = "strip-row";
  const name = document.createElement("span");
  name.className = "strip-name";
  name.textContent = camera;
  row.append(name);
  const cells = Array.from({ length: windowSize }, () => {
    const canvas = document.createElement("canvas");
    canvas.className = "thumb";
    row.append(canvas);
    return canvas;
  });
  filmstrip.append(row);
  return cells;
});
const timeline = new Timeline(timelineCanvas, model);

const probe = { ready: 0, lastDraw: { position: -1, at: 0 }, state, model, framesComplete: () => store.complete };
(window as unknown as { __rs: typeof probe }).__rs = probe;

// ---- saving ----------------------------------------------------------------------------------
const queue = new SerialQueue((busy) => {
  if (saveStatus.dataset.state === "error") return;
  saveStatus.dataset.state = busy ? "busy" : "idle";
  saveStatus.textContent = busy ? "Saving…" : "Saved";
});
saveStatus.dataset.state = "idle";
const undo = new UndoStack();

function failed(error: unknown): void {
  saveStatus.dataset.state = "error";
  saveStatus.textContent = `Not saved: ${error instanceof Error ? error.message : String(error)}`;
  queue
    .run(reload)
    .then(() => {
      saveStatus.dataset.state = queue.busy ? "busy" : "idle";
    })
    .catch(() => undefined); // still offline: the message stays until a save succeeds
}

function send<T>(
  path: string,
  init: RequestInit & { json?: unknown },
  onConflict?: (conflicts: Conflict[]) => void,
): Promise<T | undefined> {
  return queue.run(() => api<T>(path, init)).then(
    (result) => {
      if (saveStatus.dataset.state === "error") {
        // saving works again: the idle callback will say "Saved" once the queue drains
        saveStatus.dataset.state = "busy";
        saveStatus.textContent = "Saving…";
      }
      return result;
    },
    (error) => {
      const conflicts = conflictsOf(error);
      if (conflicts && onConflict) onConflict(conflicts);
      else failed(error);
      return undefined;
    },
  );
}

// Local edits, numbered, so a reload that raced with newer edits keeps them on screen (they are on their way).
let localSeq = 0;
const frameWrites = new Map<number, [number, string | null]>();
const windowWrites = new Map<string, [number, number, number, string | null]>();

async function reload(): Promise<void> {
  const since = localSeq;
  const fresh = await api<EpisodeData>(`${episodeApi}/labeling`);
  model.human = fresh.frame_labels.human;
  model.proposal = fresh.frame_labels.proposal;
  model.proposalStatus = fresh.frame_labels.proposal_status;
  loadWindows(fresh.windows);
  for (const [p, [seq, value]] of frameWrites) {
    if (seq > since || frameBuffer.has(p)) model.human[p] = value; // newer, or not sent yet
    else frameWrites.delete(p);
  }
  for (const [key, [seq, start, end, value]] of windowWrites) {
    if (seq > since) applyWindow(start, end, value);
    else windowWrites.delete(key);
  }
  labelsChanged();
}

// ---- concurrent edits ------------------------------------------------------------------------
// Every write names the value it was based on (what this page showed). When someone else changed a label
// meanwhile the server saves nothing and answers 409 with their value; the panel below shows both and the
// person picks. An undo is based on the value it undoes, so it never reverts another person's change.
type Edit = [position: number, value: string | null, base: string | null];
type WindowEdit = [start: number, end: number, value: string | null, base: string | null];
interface Conflict {
  start: number;
  end: number;
  base: string | null;
  current: string | null;
  by: string;
}

function conflictsOf(error: unknown): Conflict[] | null {
  if (!(error instanceof ApiError) || error.status !== 409) return null;
  const body = error.body as { conflicts?: Conflict[] } | null;
  return body?.conflicts ?? null;
}

const conflictPanel = document.createElement("div");
conflictPanel.id = "conflict";
conflictPanel.className = "conflict-panel";
conflictPanel.setAttribute("role", "alertdialog");
conflictPanel.hidden = true;
document.body.append(conflictPanel);
const pendingConflicts: { text: string; mine: () => void; theirs: () => void }[] = [];

function showConflict(text: string, mine: () => void, theirs: () => void): void {
  pendingConflicts.push({ text, mine, theirs });
  renderConflict();
}

function renderConflict(): void {
  const next = pendingConflicts[0];
  conflictPanel.hidden = !next;
  if (!next) return;
  conflictPanel.replaceChildren();
  const title = document.createElement("strong");
  title.textContent = "Someone else changed these labels while you were editing";
  const body = document.createElement("p");
  body.className = "conflict-text";
  body.textContent = next.text;
  const mine = document.createElement("button");
  mine.dataset.choice = "mine";
  mine.textContent = "Keep mine";
  const theirs = document.createElement("button");
  theirs.dataset.choice = "theirs";
  theirs.textContent = "Take theirs";
  const choose = (pick: () => void) => () => {
    pendingConflicts.shift();
    pick();
    renderConflict();
    labelsChanged();
  };
  mine.addEventListener("click", choose(next.mine));
  theirs.addEventListener("click", choose(next.theirs));
  conflictPanel.append(title, body, mine, theirs);
}

const shown = (value: string | null) => value ?? "no label";

function frameConflict(sent: Edit[], conflicts: Conflict[]): void {
  const byIndex = new Map(conflicts.map((c) => [c.start, c]));
  const clash = sent.filter(([p]) => byIndex.has(indexOf[p]));
  const rest = sent.filter(([p]) => !byIndex.has(indexOf[p]));
  if (rest.length) sendFrames(rest); // not saved either (all or nothing): their bases still hold
  const text = clash
    .map(([p, value]) => {
      const c = byIndex.get(indexOf[p])!;
      return `Step ${indexOf[p]}: ${c.by || "someone"} set ${shown(c.current)}; you set ${shown(value)}.`;
    })
    .join(" ");
  showConflict(
    text,
    () => sendFrames(clash.map(([p, value]) => [p, value, byIndex.get(indexOf[p])!.current])),
    () => {
      for (const [p] of clash) {
        model.human[p] = byIndex.get(indexOf[p])!.current;
        frameWrites.delete(p);
      }
    },
  );
}

function windowConflict(sent: WindowEdit[], conflicts: Conflict[]): void {
  const key = (start: number, end: number) => `${start}-${end}`;
  const bySpan = new Map(conflicts.map((c) => [key(c.start, c.end), c]));
  const find = ([s, e]: WindowEdit) => bySpan.get(key(indexOf[s], indexOf[e]));
  const clash = sent.filter((w) => find(w));
  const rest = sent.filter((w) => !find(w));
  if (rest.length) sendWindows(rest);
  const text = clash
    .map((w) => {
      const c = find(w)!;
      return `Window ${c.start}–${c.end}: ${c.by || "someone"} set ${shown(c.current)}; you set ${shown(w[2])}.`;
    })
    .join(" ");
  showConflict(
    text,
    () => sendWindows(clash.map((w) => [w[0], w[1], w[2], find(w)!.current])),
    () => {
      for (const w of clash) {
        applyWindow(w[0], w[1], find(w)!.current);
        windowWrites.delete(key(w[0], w[1]));
      }
    },
  );
}

function sendFrames(edits: Edit[], keepalive = false): void {
  const first = edits[0];
  const last = edits[edits.length - 1];
  const oneRange =
    last[0] - first[0] === edits.length - 1 && edits.every(([, v, b]) => v === first[1] && b === first[2]);
  const json = oneRange
    ? { start: indexOf[first[0]], end: indexOf[last[0]], value: first[1], base: first[2] }
    : { items: edits.map(([p, value, base]) => ({ index: indexOf[p], value, base })) };
  send(`${episodeApi}/frame-labels`, { method: "PUT", json, keepalive }, (c) => frameConflict(edits, c));
}

function sendWindows(edits: WindowEdit[]): void {
  const json = { items: edits.map(([s, e, value, base]) => ({ start: indexOf[s], end: indexOf[e], value, base })) };
  send(`${episodeApi}/window-labels`, { method: "POST", json }, (c) => windowConflict(edits, c));
}

// Frame writes are buffered for a moment and sent as ranges (a held key labels many frames).
const frameBuffer = new Map<number, [value: string | null, base: string | null]>();
let flushTimer = 0;

function flushFrames(keepalive = false): void {
  window.clearTimeout(flushTimer);
  flushTimer = 0;
  if (!frameBuffer.size) return;
  const edits = [...frameBuffer.entries()].sort((a, b) => a[0] - b[0]).map(([p, [v, b]]) => [p, v, b] as Edit);
  frameBuffer.clear();
  sendFrames(edits, keepalive);
}

function writeFrames(items: Edit[], delay = 0): void {
  for (const [p, value, base] of items) {
    model.human[p] = value;
    // a frame changed twice before sending keeps the base of its first change
    frameBuffer.set(p, [value, frameBuffer.get(p)?.[1] ?? base]);
    frameWrites.set(p, [++localSeq, value]);
  }
  labelsChanged();
  window.clearTimeout(flushTimer);
  flushTimer = window.setTimeout(flushFrames, delay);
}

function labelFrames(positions: number[], value: string | null, record = true): [number, string | null][] {
  const olds = positions.filter((p) => model.human[p] !== value).map((p) => [p, model.human[p]] as [number, string | null]);
  if (!olds.length) return olds;
  writeFrames(
    olds.map(([p, old]) => [p, value, old]),
    state.held ? 150 : 0,
  );
  if (record) undo.push(framesUndo(`${value ?? "clear"} ×${olds.length}`, olds, value));
  return olds;
}

/** Undo puts back the old values based on the new one; redo the reverse: neither overwrites someone else. */
function framesUndo(label: string, olds: [number, string | null][], value: string | null) {
  return {
    label,
    undo: () => writeFrames(olds.map(([p, old]) => [p, old, value])),
    redo: () => writeFrames(olds.map(([p, old]) => [p, value, old])),
  };
}

function humanWindow(start: number, end: number) {
  return model.windows.find((w) => w.source === "human" && w.start === start && w.end === end);
}

function applyWindow(start: number, end: number, value: string | null): void {
  const existing = humanWindow(start, end);
  if (value === null) model.windows = model.windows.filter((w) => w !== existing);
  else if (existing) existing.value = value;
  else model.windows.push({ start, end, value, source: "human", status: "open", score: null });
}

function writeWindows(items: WindowEdit[]): void {
  for (const [start, end, value] of items) {
    applyWindow(start, end, value);
    windowWrites.set(`${start}-${end}`, [++localSeq, start, end, value]);
  }
  labelsChanged();
  flushFrames();
  sendWindows(items);
}

function labelWindow(value: WindowValue | null): void {
  const span = windowSpan();
  if (!span) return;
  const old = humanWindow(span[0], span[1])?.value ?? null;
  if (old === value) return;
  writeWindows([[span[0], span[1], value, old]]);
  undo.push({
    label: `window ${value ?? "delete"}`,
    undo: () => writeWindows([[span[0], span[1], old, value]]),
    redo: () => writeWindows([[span[0], span[1], value, old]]),
  });
  if (state.autoAdvance && value !== null) move(state.cursor + stride);
}

// ---- proposals -------------------------------------------------------------------------------
interface Scope {
  kind: "frame" | "window" | "all";
  episode: string;
  start?: number;
  end?: number;
}

function scopesHere(): Scope[] {
  const sel = selection();
  if (sel) return [{ kind: "all", episode: uuid, start: indexOf[sel[0]], end: indexOf[sel[1]] }];
  const scopes: Scope[] = [{ kind: "frame", episode: uuid, start: indexOf[state.cursor], end: indexOf[state.cursor] }];
  const span = windowSpan();
  if (span) scopes.push({ kind: "window", episode: uuid, start: indexOf[span[0]], end: indexOf[span[1]] });
  return scopes;
}

async function decide(action: "accept" | "reject", scopes: Scope[]): Promise<void> {
  flushFrames();
  const results = await Promise.all(scopes.map((scope) => send<Decision>(`${projectApi}/proposals/${action}`, { method: "POST", json: scope })));
  await queue.run(reload).catch(failed);
  const count = results.reduce((sum, r) => sum + (r ? r.frames + r.windows : 0), 0);
  flash(count ? `${action === "accept" ? "Accepted" : "Rejected"} ${count} proposal${count === 1 ? "" : "s"}` : "No open proposals here");
  if (!count) return;
  const previousFrames = results.flatMap((r) => r?.previous_frames[uuid] ?? []);
  const previousWindows = results.flatMap((r) => r?.previous_windows[uuid] ?? []);
  undo.push({
    label: `${action} proposals`,
    undo: async () => {
      if (previousFrames.length) send(`${episodeApi}/frame-labels`, { method: "PUT", json: { items: previousFrames } });
      if (previousWindows.length) send(`${episodeApi}/window-labels`, { method: "POST", json: { items: previousWindows } });
      await Promise.all(scopes.map((scope) => send(`${projectApi}/proposals/reopen`, { method: "POST", json: scope })));
      await queue.run(reload).catch(failed);
    },
    redo: async () => {
      await Promise.all(scopes.map((scope) => send(`${projectApi}/proposals/${action}`, { method: "POST", json: scope })));
      await queue.run(reload).catch(failed);
    },
  });
}

async function generate(): Promise<void> {
  const result = await send<{ frames_created: number; windows_created: number }>(`${projectApi}/proposals/generate`, {
    method: "POST",
    json: { episode: uuid },
  });
  await queue.run(reload).catch(failed);
  if (result) flash(`Proposals: ${result.frames_created} new frame, ${result.windows_created} new window`);
}

// ---- navigation ------------------------------------------------------------------------------
function selection(): [number, number] | null {
  if (state.anchor === null) return null;
  return [Math.min(state.anchor, state.cursor), Math.max(state.anchor, state.cursor)];
}

function windowSpan(): [number, number] | null {
  if (n < windowSize) return null;
  const start = Math.max(0, Math.min(state.cursor, n - windowSize));
  return [start, start + windowSize - 1];
}

function move(to: number, options: { select?: boolean } = {}): void {
  const target = Math.max(0, Math.min(n - 1, to));
  if (options.select) state.anchor ??= state.cursor;
  else state.anchor = null;
  const from = state.cursor;
  state.cursor = target;
  if (state.held && target !== from) {
    const passed: number[] = [];
    const step = target > from ? 1 : -1;
    for (let p = from + step; p !== target + step; p += step) passed.push(p);
    holdLabel(passed);
  }
  render();
}

function render(): void {
  drawViews();
  timeline.draw(state.cursor, selection(), windowSpan());
  renderInfo();
  renderWindow();
  store.setFocus(state.cursor);
}

function drawViews(): void {
  let drawn = true;
  views.forEach((view, c) => {
    const image = store.get(c, state.cursor);
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
    probe.lastDraw = { position: state.cursor, at: performance.now() };
    if (!probe.ready) {
      probe.ready = performance.now();
      document.body.dataset.ready = "1";
    }
  }
}

const fmt = (v: unknown) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v));

function renderInfo(): void {
  const p = state.cursor;
  const human = model.human[p];
  const proposal = model.proposal[p];
  const action = data.steps.action[p];
  const score = data.steps.score[p];
  stepInfo.innerHTML = `
    <span>Step <b id="step-number">${indexOf[p]}</b> <span class="muted">(${p + 1} / ${n})</span></span>
    <span>reward <b>${fmt(data.steps.reward[p])}</b>${score === null ? "" : ` · score <b>${fmt(score)}</b>`}</span>
    <span>env success <b class="${data.steps.success[p] ? "yes" : "no"}">${data.steps.success[p] ? "yes" : "no"}</b></span>
    <span class="action">action <code>${Array.isArray(action) ? `[${action.map(fmt).join(", ")}]` : fmt(action)}</code></span>
    <span>label <b id="frame-label" class="chip ${human ?? "none"}">${human ?? "none"}</b></span>
    <span>proposal <b class="chip proposal ${proposal ?? "none"}">${proposal ?? "none"}</b>${proposal ? ` <span class="muted">${model.proposalStatus[p]}</span>` : ""}</span>
    ${selection() ? `<span class="selection">selected ${indexOf[selection()![0]]}–${indexOf[selection()![1]]}</span>` : ""}`;
}

function renderWindow(): void {
  const span = windowSpan();
  const spanEl = $("window-span");
  const labelsEl = $("window-labels");
  if (!span) {
    spanEl.textContent = `episode shorter than ${windowSize} steps`;
    labelsEl.textContent = "";
    return;
  }
  spanEl.textContent = `steps ${indexOf[span[0]]}–${indexOf[span[1]]}`;
  const human = humanWindow(span[0], span[1]);
  const proposal = model.windows.find((w) => w.source !== "human" && w.start === span[0] && w.end === span[1]);
  labelsEl.innerHTML =
    `human <b id="window-label" class="chip ${human?.value ?? "none"}">${human?.value ?? "none"}</b>` +
    (proposal
      ? ` · proposal <b class="chip proposal ${proposal.value}">${proposal.value}</b> <span class="muted">Δ ${fmt(proposal.score ?? 0)} ${proposal.status}</span>`
      : "");
  strip.forEach((cells, c) => {
    cells.forEach((canvas, k) => {
      const image = store.get(c, span[0] + k);
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

function labelsChanged(): void {
  timeline.redrawBase();
  timeline.draw(state.cursor, selection(), windowSpan());
  renderInfo();
  renderWindow();
}

let flashTimer = 0;
function flash(message: string): void {
  const el = $("step-info");
  el.dataset.flash = message;
  window.clearTimeout(flashTimer);
  flashTimer = window.setTimeout(() => delete el.dataset.flash, 2500);
}

// ---- frame labels from keys ------------------------------------------------------------------
let holdOlds: Map<number, string | null> | null = null;
let holdCount = 0;

function holdLabel(positions: number[]): void {
  if (!state.held || !holdOlds) return;
  holdCount += positions.length;
  const olds = labelFrames(positions, state.held, false);
  for (const [p, old] of olds) if (!holdOlds.has(p)) holdOlds.set(p, old);
}

function startHold(value: FrameValue): void {
  const sel = selection();
  if (sel) {
    const positions = Array.from({ length: sel[1] - sel[0] + 1 }, (_, k) => sel[0] + k);
    labelFrames(positions, value);
    return;
  }
  state.held = value;
  holdOlds = new Map();
  holdCount = 0;
  holdLabel([state.cursor]);
}

function endHold(): void {
  if (!state.held || !holdOlds) return;
  const value = state.held;
  const olds = [...holdOlds.entries()];
  state.held = null;
  holdOlds = null;
  flushFrames();
  if (olds.length) undo.push(framesUndo(`${value} ×${olds.length}`, olds, value));
  if (state.autoAdvance && !state.playing && holdCount === 1) move(state.cursor + 1);
}

function clearHere(): void {
  const sel = selection();
  const positions = sel ? Array.from({ length: sel[1] - sel[0] + 1 }, (_, k) => sel[0] + k) : [state.cursor];
  labelFrames(positions, null);
  if (!sel && state.autoAdvance && !state.playing) move(state.cursor + 1);
}

function findFrom(start: number, direction: 1 | -1, test: (p: number) => boolean): number | null {
  for (let p = start + direction; p >= 0 && p < n; p += direction) if (test(p)) return p;
  return null;
}

const proposalRunStart = (p: number) =>
  model.proposalStatus[p] === "open" &&
  (p === 0 || model.proposalStatus[p - 1] !== "open" || model.proposal[p - 1] !== model.proposal[p]);

// ---- playback --------------------------------------------------------------------------------
let lastTick = 0;
function setPlaying(on: boolean): void {
  state.playing = on && n > 1;
  playButton.textContent = state.playing ? "❚❚ Pause" : "▶ Play";
  if (state.playing) {
    if (state.cursor >= n - 1) move(0);
    lastTick = performance.now();
    requestAnimationFrame(tick);
  }
}

function tick(now: number): void {
  if (!state.playing) return;
  const interval = 1000 / state.fps;
  if (now - lastTick >= interval) {
    lastTick = now - ((now - lastTick) % interval);
    if (state.cursor >= n - 1) {
      setPlaying(false);
      return;
    }
    move(state.cursor + 1);
  }
  requestAnimationFrame(tick);
}

// ---- keyboard --------------------------------------------------------------------------------
async function doUndo(redo = false): Promise<void> {
  flushFrames();
  const entry = redo ? await undo.redo() : await undo.undo();
  flash(entry ? `${redo ? "Redid" : "Undid"} ${entry.label}` : `Nothing to ${redo ? "redo" : "undo"}`);
}

function onKeyDown(event: KeyboardEvent): void {
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
      doUndo(event.shiftKey);
    } else if (key.toLowerCase() === "y") {
      event.preventDefault();
      doUndo(true);
    }
    return;
  }
  if (event.altKey) return;
  const repeat = event.repeat;
  let handled = true;
  switch (key) {
    case " ":
      if (!repeat) setPlaying(!state.playing);
      break;
    case "ArrowRight":
    case "ArrowLeft": {
      const step = (key === "ArrowRight" ? 1 : -1) * (event.shiftKey ? 10 : 1);
      move(state.cursor + step, { select: event.shiftKey });
      break;
    }
    case "Home":
      move(0);
      break;
    case "End":
      move(n - 1);
      break;
    case "c":
    case "C":
    case "a":
    case "A":
      if (!repeat && !state.held) startHold(key.toLowerCase() === "c" ? "success" : "fail");
      break;
    case "x":
    case "X":
      if (!repeat) clearHere();
      break;
    case "1":
    case "2":
    case "3":
      if (!repeat) labelWindow((["positive", "negative", "unclear"] as const)[Number(key) - 1]);
      break;
    case "0":
    case "Backspace":
    case "Delete":
      if (!repeat) labelWindow(null);
      break;
    case "]":
      move(state.cursor + stride);
      break;
    case "[":
      move(state.cursor - stride);
      break;
    case "n":
    case "N": {
      if (key === "n" && fromQueue) {
        // opened from the labeling queue: save, then go to the next most valuable frame
        flushFrames();
        void queue.run(async () => undefined).then(() => location.assign(`/projects/${fromQueue}/label-next`));
        break;
      }
      const found = findFrom(state.cursor, key === "n" ? 1 : -1, (p) => model.human[p] === null);
      if (found === null) flash("No unlabeled step that way");
      else move(found);
      break;
    }
    case "p":
    case "P": {
      const found = findFrom(state.cursor, key === "p" ? 1 : -1, proposalRunStart);
      if (found === null) flash("No open proposal that way");
      else move(found);
      break;
    }
    case "y":
      if (!repeat) decide("accept", scopesHere());
      break;
    case "Y":
      if (!repeat) decide("accept", [{ kind: "all", episode: uuid }]);
      break;
    case "r":
      if (!repeat) decide("reject", scopesHere());
      break;
    case "R":
      if (!repeat) decide("reject", [{ kind: "all", episode: uuid }]);
      break;
    case "z":
      if (!repeat) doUndo(false);
      break;
    case "Z":
      if (!repeat) doUndo(true);
      break;
    case "t":
      if (!repeat) {
        state.autoAdvance = !state.autoAdvance;
        autoBox.checked = state.autoAdvance;
        flash(`Auto-advance ${state.autoAdvance ? "on" : "off"}`);
      }
      break;
    case "?":
      help.showModal();
      break;
    case "h":
      if (!repeat) historyPanel.open = !historyPanel.open;
      break;
    case "Escape":
      state.anchor = null;
      render();
      break;
    default:
      handled = false;
  }
  if (handled) event.preventDefault();
}

function onKeyUp(event: KeyboardEvent): void {
  const key = event.key.toLowerCase();
  if ((key === "c" && state.held === "success") || (key === "a" && state.held === "fail")) endHold();
}

document.addEventListener("keydown", onKeyDown);
document.addEventListener("keyup", onKeyUp);
window.addEventListener("blur", endHold);

// ---- mouse and buttons -----------------------------------------------------------------------
let dragging: { select: boolean } | null = null;
timelineCanvas.addEventListener("mousedown", (event) => {
  dragging = { select: event.shiftKey };
  move(timeline.positionAt(event.clientX), { select: event.shiftKey });
  event.preventDefault();
});
window.addEventListener("mousemove", (event) => {
  if (dragging) move(timeline.positionAt(event.clientX), { select: dragging.select });
});
window.addEventListener("mouseup", () => {
  dragging = null;
});
window.addEventListener("resize", () => {
  timeline.resize();
  timeline.draw(state.cursor, selection(), windowSpan());
});

playButton.addEventListener("click", () => setPlaying(!state.playing));
// Form controls give the focus back at once, so the keyboard keeps driving the page.
fpsSelect.addEventListener("change", () => {
  state.fps = Number(fpsSelect.value) || 10;
  fpsSelect.blur();
});
autoBox.addEventListener("change", () => {
  state.autoAdvance = autoBox.checked;
  autoBox.blur();
});

interface Change {
  at: string;
  who: string;
  kind: string;
  action: string;
  source: string;
  start: number;
  end: number;
  old_value: string;
  new_value: string;
}
const historyPanel = $<HTMLDetailsElement>("history");
async function showHistory(): Promise<void> {
  const rows = await api<Change[]>(`${episodeApi}/history`);
  const body = $("history-rows");
  body.replaceChildren(
    ...rows.map((c) => {
      const tr = document.createElement("tr");
      const cells = [
        new Date(c.at).toLocaleString(),
        c.who,
        `${c.kind} ${c.action}${c.source === "human" ? "" : ` (${c.source})`}`,
        c.start === c.end ? String(c.start) : `${c.start}–${c.end}`,
        `${c.old_value || "—"} → ${c.new_value || "—"}`,
      ];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    }),
  );
}
historyPanel.addEventListener("toggle", () => {
  if (historyPanel.open) queue.run(showHistory).catch(failed);
});
for (const button of document.querySelectorAll<HTMLButtonElement>("[data-frame]")) {
  button.addEventListener("click", () => {
    const value = button.dataset.frame as FrameValue | "";
    if (value) {
      startHold(value);
      endHold();
    } else clearHere();
  });
}
for (const button of document.querySelectorAll<HTMLButtonElement>("[data-window]")) {
  button.addEventListener("click", () => labelWindow((button.dataset.window || null) as WindowValue | null));
}
$("accept-here").addEventListener("click", () => decide("accept", scopesHere()));
$("accept-episode").addEventListener("click", () => decide("accept", [{ kind: "all", episode: uuid }]));
$("reject-here").addEventListener("click", () => decide("reject", scopesHere()));
$("generate").addEventListener("click", () => generate());
$("undo").addEventListener("click", () => doUndo(false));
$("redo").addEventListener("click", () => doUndo(true));
$("help-button").addEventListener("click", () => help.showModal());
// Buttons must not keep focus, or space would press them again instead of playing.
for (const button of document.querySelectorAll<HTMLButtonElement>("#labeler button, .label-head button")) {
  button.addEventListener("mouseup", () => button.blur());
}
window.addEventListener("beforeunload", (event) => {
  flushFrames(true);
  if (queue.busy) event.preventDefault();
});

// ---- start -----------------------------------------------------------------------------------
store.onLoad((camera, position) => {
  if (position === state.cursor) drawViews();
  const span = windowSpan();
  if (span && position >= span[0] && position <= span[1]) renderWindow();
  void camera;
});
const startStep = Number(new URLSearchParams(location.search).get("step"));
const fromQueue = Number(new URLSearchParams(location.search).get("queue")) || 0; // project of the labeling queue
state.cursor = positionOf.get(startStep) ?? 0;
for (const [value, color] of Object.entries(COLORS)) document.documentElement.style.setProperty(`--label-${value}`, color);
if (n === 0) stepInfo.textContent = "This episode has no steps yet.";
else {
  render();
  // An episode nobody has generated proposals for gets them on first open (existing ones are never redone here).
  const hasProposals = model.proposal.some((v) => v !== null) || model.windows.some((w) => w.source !== "human");
  if (!hasProposals && data.episode.status === "finished") void generate();
}
