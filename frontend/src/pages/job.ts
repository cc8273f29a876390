// Job page: live loss/accuracy curves, progress bar with ETA, status and log, pushed over a WebSocket.
// On (re)connect the server sends the whole history, then live events.
import uPlot from "uplot";
import type { JobState } from "../generated/page-data";
import { pageData } from "../lib/api";
import { $ } from "../lib/dom";
import { reconnectingSocket } from "../lib/socket";
import { themedAxes } from "../lib/chart_theme";
import { sanityNotice } from "../lib/sanity";

interface Point { kind: "step" | "epoch"; step: number; epoch: number | null; [metric: string]: number | string | null; }
type State = JobState; // also what the socket's history and status events carry (in part)

const data = pageData("job");
const steps = new Map<number, Point>();
const epochs = new Map<number, Point>();
let status = data.state.status;

type YScale = [number, number] | "clipped" | "log";

// The loss's linear scale: from 0 to a little over the 95th percentile of the points drawn, so the first
// epoch's spike (8.4 on the tour) does not flatten every later one; the few points above are clipped.
function clippedTop(u: uPlot): [number, number] {
  const values = u.data.slice(1).flatMap((s) => Array.from(s as ArrayLike<number | null>)).filter((v): v is number => v !== null && Number.isFinite(v)).sort((a, b) => a - b);
  if (!values.length) return [0, 1];
  const top = values[Math.min(values.length - 1, Math.floor(0.95 * (values.length - 1)))];
  return [0, Math.max(top * 1.25, 1e-6)];
}

function yScale(yRange?: YScale): uPlot.Scale {
  if (yRange === "log") return { distr: 3 };
  if (yRange === "clipped") return { range: clippedTop };
  return yRange ? { range: yRange } : {};
}

function chart(el: HTMLElement, title: string, series: { label: string; stroke: string; points?: boolean }[], yRange?: YScale): uPlot {
  const opts: uPlot.Options = {
    width: Math.max(240, el.clientWidth - 10), height: 260, title,
    scales: { x: { time: false }, y: yScale(yRange) },
    axes: themedAxes([{ label: "step" }, {}]),
    series: [{ label: "step" }, ...series.map((s) => ({
      label: s.label, stroke: s.stroke, width: s.points ? 2 : 1, spanGaps: true,
      points: { show: s.points ?? false, size: 6 },
    }))],
  };
  return new uPlot(opts, [[], ...series.map(() => [])] as unknown as uPlot.AlignedData, el);
}

const LOSS_SERIES = [
  { label: "train loss (step)", stroke: "#3b6df0" },
  { label: "val loss (epoch)", stroke: "#d64545", points: true },
];
const logToggle = document.getElementById("loss-log") as HTMLInputElement;
let lossChart = chart($("loss-chart"), "loss", LOSS_SERIES, logToggle.checked ? "log" : "clipped");
// "log scale" draws every point, the first epoch's included; off: the clipped linear scale
logToggle.addEventListener("change", () => {
  lossChart.destroy();
  lossChart = chart($("loss-chart"), "loss", LOSS_SERIES, logToggle.checked ? "log" : "clipped");
  (window as unknown as { __lossChart: uPlot }).__lossChart = lossChart;
  lossChart.setData(aligned("train_loss", "val_loss"));
});
(window as unknown as { __lossChart: uPlot }).__lossChart = lossChart;
const accChart = chart($("acc-chart"), "accuracy", [
  { label: "train acc (step)", stroke: "#3b6df0" },
  { label: "val acc (epoch)", stroke: "#1f9d55", points: true },
], [0, 1]);

function aligned(stepKey: string, epochKey: string): uPlot.AlignedData {
  const xs = Array.from(new Set([...steps.keys(), ...Array.from(epochs.values(), (p) => p.step)])).sort((a, b) => a - b);
  const byStep = new Map(Array.from(epochs.values(), (p) => [p.step, p]));
  return [
    xs,
    xs.map((x) => (steps.get(x)?.[stepKey] as number | undefined) ?? null),
    xs.map((x) => (byStep.get(x)?.[epochKey] as number | undefined) ?? null),
  ] as unknown as uPlot.AlignedData;
}

let pending = false;
function redraw(): void {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    lossChart.setData(aligned("train_loss", "val_loss"));
    accChart.setData(aligned("train_acc", "val_acc"));
    renderLatest();
  });
}

function renderLatest(): void {
  const last = Array.from(epochs.values()).sort((a, b) => a.step - b.step).at(-1);
  const lastStep = Math.max(-1, ...steps.keys());
  const rows: [string, string][] = [["steps", String(Math.max(0, lastStep))]];
  if (last) {
    rows.push(["epoch", String(last.epoch)]);
    for (const key of ["val_loss", "val_acc", "train_loss", "train_acc"]) {
      const v = last[key];
      if (typeof v === "number") rows.push([key, v.toFixed(4)]);
    }
  }
  $("latest").innerHTML = rows.map(([k, v]) => `<tr><th>${k}</th><td data-metric="${k}">${v}</td></tr>`).join("");
}

function addPoints(points: Point[]): void {
  for (const p of points) (p.kind === "epoch" ? epochs : steps).set(p.kind === "epoch" ? (p.epoch ?? p.step) : p.step, p);
  redraw();
}

function formatEta(seconds: number | null): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
  if (seconds < 60) return `${Math.round(seconds)} s left`;
  const m = Math.floor(seconds / 60);
  return m < 60 ? `${m} min ${Math.round(seconds % 60)} s left` : `${Math.floor(m / 60)} h ${m % 60} min left`;
}

function setProgress(progress: number, eta: number | null): void {
  const percent = Math.round(Math.max(0, Math.min(1, progress)) * 100);
  $("progress-bar").style.width = `${percent}%`;
  $("progress-text").textContent = `${percent}%`;
  $("eta").textContent = status === "running" ? formatEta(eta) : "";
}

function setStatus(state: Partial<State>): void {
  if (state.status) status = state.status;
  const badge = $("status");
  badge.textContent = status + (state.cancel_requested && status === "running" ? " (cancelling)" : "");
  badge.className = `badge ${status}`;
  (document.getElementById("cancel-btn") as HTMLButtonElement).disabled = !["queued", "running"].includes(status);
  (document.getElementById("retry-btn") as HTMLButtonElement).disabled = !["failed", "cancelled"].includes(status);
  if (status !== "queued") {
    // the "Job N queued" notice of the form that sent us here is history once the job has moved on
    document.querySelectorAll<HTMLElement>(".messages li").forEach((li) => {
      if (/\bqueued\b/.test(li.textContent ?? "")) li.remove();
    });
  }
  if (state.error) {
    $("error-panel").hidden = false;
    $("error").textContent = state.error;
  }
  if (state.models?.length) {
    $("models-link").innerHTML = state.models.map((id) => `<a href="/models/${id}/evaluation">Open the evaluation</a>`).join(" ");
  }
  if (state.sanity) $("sanity").innerHTML = sanityNotice(state.sanity);
  if (state.progress !== undefined) setProgress(state.progress, state.eta_seconds ?? null);
}

function appendLog(lines: string[]): void {
  if (!lines.length) return;
  const log = $("log");
  const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 5;
  log.textContent += lines.map((l) => l + "\n").join("");
  if (atBottom) log.scrollTop = log.scrollHeight;
}

function onMessage(msg: any): void {
  if (msg.event === "history") {
    steps.clear(); epochs.clear();
    addPoints(msg.points ?? []);
    $("log").textContent = msg.log ?? "";
    setStatus(msg);
  } else if (msg.event === "progress") {
    addPoints(msg.points ?? []);
    appendLog(msg.log ?? []);
    setProgress(msg.progress, msg.eta_seconds);
  } else if (msg.event === "resumed") {
    // a requeued job goes on from its checkpoint: points the lost run drew after it are void
    for (const [key, p] of steps) if (p.step > msg.step) steps.delete(key);
    for (const [key, p] of epochs) if (p.step > msg.step) epochs.delete(key);
    appendLog([`resumed from step ${msg.step}`]);
    redraw();
  } else if (msg.event === "status") {
    if (msg.reset) { steps.clear(); epochs.clear(); $("log").textContent = ""; redraw(); }
    setStatus(msg);
  }
}

setStatus(data.state);
window.addEventListener("resize", () => {
  for (const [c, el] of [[lossChart, $("loss-chart")], [accChart, $("acc-chart")]] as [uPlot, HTMLElement][]) {
    c.setSize({ width: Math.max(240, el.clientWidth - 10), height: 260 });
  }
});
reconnectingSocket(data.ws, {
  onMessage,
  finalCodes: [4401, 4404],
  onOpen: () => { document.body.dataset.ws = "open"; },
  onClose: () => { document.body.dataset.ws = "closed"; },
});
