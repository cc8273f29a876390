// Live teleop dashboard: camera views, a rolling success-probability chart with the threshold, episode
// boundaries and operator labels, and the stream's health. Reconnects by itself (backoff) and resumes.
import uPlot from "uplot";
import { pageData } from "../lib/api";
import { $ } from "../lib/dom";
import { ema, RateMeter } from "../lib/rate";
import { reconnectingSocket } from "../lib/socket";
import { cssVar, themedAxes } from "../lib/chart_theme";

type Message = Record<string, any> & { type: string };

const WINDOW_S = 60;
const data = pageData("teleop_dashboard");
let threshold = data.threshold;

// --- cameras ---------------------------------------------------------------------------------
const cams = $("cams");
const camImages = new Map<string, HTMLImageElement>();
function camera(name: string): HTMLImageElement {
  let img = camImages.get(name);
  if (!img) {
    const figure = document.createElement("figure");
    img = document.createElement("img");
    img.alt = name;
    img.dataset.camera = name;
    const caption = document.createElement("figcaption");
    caption.className = "muted";
    caption.textContent = name;
    figure.append(img, caption);
    cams.append(figure);
    camImages.set(name, img);
  }
  return img;
}
data.cameras.forEach(camera);

// --- off-distribution flag: the live reward says when the model never saw anything like the frame ---
const oodSeen = { checked: 0, flagged: 0 };
function showOod(ood: boolean | null | undefined): void {
  $("ood-flag").style.display = ood === true ? "" : "none"; // a badge's display would override `hidden`
  if (ood === true || ood === false) {
    oodSeen.checked += 1;
    oodSeen.flagged += Number(ood);
  }
  $("ood-count").textContent = oodSeen.checked
    ? `${oodSeen.flagged} of ${oodSeen.checked}`
    : "not checked"; // a model without OOD statistics
  document.body.dataset.oodFlagged = String(oodSeen.flagged);
}

// --- chart -----------------------------------------------------------------------------------
const xs: number[] = [];
const probs: (number | null)[] = [];
const thresholds: number[] = [];
const smoothed: (number | null)[] = [];
// The env's own success flag of each scored step (1 / 0; null when its frame was not seen), drawn as a
// stepped band under p(success) so the model can be read against what the simulator says.
const envSuccess: (number | null)[] = [];
const envSuccessOf = new Map<string, boolean>(); // "episode:index" -> the frame's env success, the latest few
const ENV_FLAGS_KEPT = 4096;
const envBox = $("env-overlay") as HTMLInputElement;
const SMOOTH_KEY = "rs.teleop.smoothing";
const smoothBox = $("smooth") as HTMLInputElement;
const smoothAlpha = $("smooth-alpha") as HTMLInputElement;
smoothBox.checked = localStorage.getItem(SMOOTH_KEY) === "1";
const boundaries: { t: number; kind: "start" | "end"; success?: boolean }[] = [];
const labels: { t: number; value: string }[] = [];

function drawMarks(u: uPlot) {
  const ctx = u.ctx;
  const { top, height } = u.bbox;
  ctx.save();
  for (const b of boundaries) {
    const x = u.valToPos(b.t, "x", true);
    if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
    ctx.strokeStyle = b.kind === "start" ? cssVar("--muted", "#667085") : b.success ? "#1f9d55" : "#d64545";
    ctx.lineWidth = 1.5 * devicePixelRatio;
    ctx.setLineDash(b.kind === "start" ? [] : [4 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, top + height);
    ctx.stroke();
  }
  ctx.setLineDash([]);
  for (const l of labels) {
    const x = u.valToPos(l.t, "x", true);
    const y = u.valToPos(l.value === "success" ? 1 : 0, "y", true);
    ctx.fillStyle = l.value === "success" ? "#1f9d55" : "#d64545";
    ctx.beginPath();
    ctx.arc(x, y, 6 * devicePixelRatio, 0, 2 * Math.PI);
    ctx.fill();
  }
  ctx.restore();
}

const chartEl = $("chart");
const plot = new uPlot(
  {
    width: Math.max(240, chartEl.clientWidth || 900),
    height: 260,
    scales: { x: { time: false }, y: { range: [0, 1] } },
    axes: themedAxes([{ label: "seconds", values: (_u, ticks) => ticks.map((t) => (t - Date.now() / 1000).toFixed(0)) }, { label: "p(success)" }]),
    series: [
      {},
      { label: "p(success)", stroke: "#3b6df0", width: 2, spanGaps: true },
      { label: "threshold", stroke: "#d68f1f", dash: [6, 4], width: 1.5, points: { show: false } },
      { label: "smoothed", stroke: "#7a3bf0", width: 2.5, spanGaps: true, points: { show: false }, show: smoothBox.checked },
      {
        label: "env success", stroke: "#1f9d55", fill: "rgba(31, 157, 85, 0.12)", width: 1, spanGaps: false,
        paths: uPlot.paths.stepped!({ align: 1 }), points: { show: false }, show: envBox.checked,
      },
    ],
    hooks: { draw: [drawMarks] },
  },
  [xs, probs, thresholds, smoothed, envSuccess] as uPlot.AlignedData,
  chartEl,
);
window.addEventListener("resize", () => plot.setSize({ width: Math.max(240, chartEl.clientWidth), height: 260 }));

function trim(now: number) {
  while (xs.length && xs[0] < now - WINDOW_S) {
    xs.shift();
    probs.shift();
    thresholds.shift();
    smoothed.shift();
    envSuccess.shift();
  }
  while (boundaries.length && boundaries[0].t < now - WINDOW_S) boundaries.shift();
  while (labels.length && labels[0].t < now - WINDOW_S) labels.shift();
}

let redrawQueued = false;
function redraw() {
  if (redrawQueued) return;
  redrawQueued = true;
  requestAnimationFrame(() => {
    redrawQueued = false;
    const now = Date.now() / 1000;
    trim(now);
    plot.batch(() => {
      plot.setData([xs, probs, thresholds, smoothed, envSuccess] as uPlot.AlignedData, false);
      // Zoom to the data until a full window has arrived, so a fresh session is not a dot at the edge.
      const first = xs.length ? xs[0] : now - 10;
      plot.setScale("x", { min: Math.max(now - WINDOW_S, Math.min(first, now - 10) - 1), max: now + 1 });
    });
  });
}
setInterval(redraw, 1000);

// Optional smoothing (an exponential moving average) drawn as a second line, so flicker can be told
// from signal; the raw probability stays on the chart.
let smoothValue: number | null = null;
function alpha(): number {
  return Math.min(1, Math.max(0.02, Number(smoothAlpha.value) || 0.3));
}
smoothBox.addEventListener("change", () => {
  localStorage.setItem(SMOOTH_KEY, smoothBox.checked ? "1" : "0");
  plot.setSeries(3, { show: smoothBox.checked });
  document.body.dataset.smoothing = smoothBox.checked ? "on" : "off";
});
document.body.dataset.smoothing = smoothBox.checked ? "on" : "off";
envBox.addEventListener("change", () => plot.setSeries(4, { show: envBox.checked }));

// Step rate from the frames this page receives, spaced by the agent's own send times.
const stepRate = new RateMeter(5, 2);
let lastFrameAt = 0;
function showRate() {
  if (!state.frames) return;
  const hz = stepRate.rate(Date.now() / 1000, lastFrameAt);
  $("rate").textContent = `${fmt(hz, 1)} Hz`;
  $("rate").dataset.hz = String(hz);
}
setInterval(showRate, 500);

// --- state shown -----------------------------------------------------------------------------
const state = {
  results: 0, frames: 0, lastProbability: null as number | null, connected: false, reconnects: 0,
  envSuccessResults: 0, envKnownResults: 0, // scored steps whose frame said env success / whose flag was seen
};
(window as any).__teleop = state;
const e2e: number[] = [];

function fmt(v: number | null | undefined, digits = 3): string {
  return v === null || v === undefined ? "–" : v.toFixed(digits);
}

function addEpisode(uuid: string, steps?: number, success?: boolean | null) {
  let li = document.querySelector<HTMLLIElement>(`li[data-episode="${uuid}"]`);
  if (!li) {
    li = document.createElement("li");
    li.dataset.episode = uuid;
    $("episodes").append(li);
  }
  const href = data.labelUrl.replace("{uuid}", uuid);
  const status = success === true ? "env success" : success === false ? "no success" : "recording";
  li.innerHTML = `<a href="${href}">${uuid}</a> <span class="muted">${steps ?? ""} ${steps !== undefined ? "steps ·" : ""} ${status}</span>`;
}

function handle(msg: Message) {
  const now = Date.now() / 1000;
  switch (msg.type) {
    case "snapshot":
      for (const e of msg.episodes ?? []) addEpisode(e.uuid, e.num_steps, e.success);
      $("live").textContent = msg.live ? "live" : "ended";
      (msg.cameras ?? []).forEach(camera);
      break;
    case "frame":
      state.frames++;
      lastFrameAt = now;
      stepRate.add(typeof msg.sent_at === "number" ? msg.sent_at : now);
      for (const [name, url] of Object.entries(msg.images ?? {})) camera(name).src = url as string;
      $("step").textContent = String(msg.index);
      envSuccessOf.set(`${msg.episode}:${msg.index}`, Boolean(msg.success));
      if (envSuccessOf.size > ENV_FLAGS_KEPT) envSuccessOf.delete(envSuccessOf.keys().next().value!);
      $("env-reward").textContent = fmt(msg.reward);
      break;
    case "result":
      state.results++;
      state.lastProbability = msg.probability;
      if (typeof msg.threshold === "number") threshold = msg.threshold;
      xs.push(now);
      probs.push(msg.probability);
      thresholds.push(threshold);
      smoothValue = ema(smoothValue, msg.probability, alpha());
      smoothed.push(smoothValue);
      {
        const flag = envSuccessOf.get(`${msg.episode}:${msg.index}`);
        envSuccess.push(flag === undefined ? null : Number(flag));
        state.envKnownResults += Number(flag !== undefined);
        state.envSuccessResults += Number(flag === true);
      }
      (window as any).__teleop.smoothed = smoothValue;
      $("prob").textContent = fmt(msg.probability);
      $("success").textContent = msg.success ? "SUCCESS" : "no";
      $("success").style.color = msg.success ? "var(--success)" : "var(--muted)";
      $("reward").textContent = fmt(msg.reward);
      showOod(msg.ood);
      $("latency").textContent = `${fmt(msg.inference_ms, 1)} ms`;
      $("dropped").textContent = String(msg.dropped ?? 0);
      $("results").textContent = String(state.results);
      if (msg.sent_at) {
        e2e.push((now - msg.sent_at) * 1000);
        if (e2e.length > 50) e2e.shift();
        const sorted = [...e2e].sort((a, b) => a - b);
        $("e2e").textContent = `${sorted[Math.floor(sorted.length / 2)].toFixed(0)} ms`;
      }
      document.body.dataset.results = String(state.results);
      redraw();
      break;
    case "episode":
      if (msg.event === "start") smoothValue = null; // a new episode starts the average afresh
      boundaries.push({ t: now, kind: msg.event, success: msg.success });
      addEpisode(msg.episode, msg.steps, msg.event === "end" ? msg.success : undefined);
      redraw();
      break;
    case "label":
      labels.push({ t: now, value: msg.value });
      redraw();
      break;
    case "status":
      if (!state.frames) $("rate").textContent = `${fmt(msg.rate_hz, 1)} Hz`; // frames give a better rate
      $("dropped").textContent = String(msg.dropped ?? 0);
      $("live").textContent = msg.live ? "live" : "ended";
      if (msg.inference_ms_p50 != null) $("latency").textContent = `${fmt(msg.inference_ms_p50, 1)} ms`;
      break;
    case "warning":
      $("warning").textContent = msg.message;
      break;
  }
}

// --- connection (shared reconnecting socket) ----------------------------------------------------
const socket = reconnectingSocket(data.wsPath, {
  onMessage: handle,
  firstDelayMs: 500,
  maxDelayMs: 5000,
  onOpen: () => {
    state.connected = true;
    $("conn").textContent = "connected";
    $("conn").className = "conn on";
  },
  onClose: (event, retryInMs) => {
    state.connected = false;
    state.reconnects = socket?.reconnects ?? 0;
    $("conn").className = "conn off";
    $("conn").textContent =
      retryInMs === null
        ? event.code === 4404
          ? "no such session"
          : "not allowed (log in again)"
        : `reconnecting in ${(retryInMs / 1000).toFixed(1)} s…`;
  },
});
