// Evaluation of one model (or two side by side) on a snapshot's validation split: metrics and confusion
// matrix at a threshold picked with a slider (with what an RL run would receive), ROC, precision-recall and
// reliability plots, and the validation frames ordered by error, each linking to its labeling page. Below,
// the project's measured label efficiency: accuracy against labels for the ranked queue and random order.
import uPlot from "uplot";
import type { EvaluationItem, LabelEfficiencyData, ModelEvaluation } from "../generated/page-data";
import { pageData } from "../lib/api";
import { themedAxes } from "../lib/chart_theme";
import { sanityNotice } from "../lib/sanity";

type Evaluation = ModelEvaluation;
type Item = EvaluationItem;

const data = pageData("evaluation");
const root = document.getElementById("evaluation")!;
const GALLERY = 60;

/** Success is probability > threshold, as the reward server decides. */
export function atThreshold(probs: number[], labels: number[], t: number) {
  let tp = 0, fp = 0, tn = 0, fn = 0;
  for (let i = 0; i < probs.length; i++) {
    const predicted = probs[i] > t, actual = labels[i] === 1;
    if (predicted && actual) tp++; else if (predicted) fp++; else if (actual) fn++; else tn++;
  }
  const ratio = (a: number, b: number) => (b ? a / b : 0);
  const precision = ratio(tp, tp + fp), recall = ratio(tp, tp + fn);
  const successes = tp + fn, fails = fp + tn;
  return {
    tp, fp, tn, fn, precision, recall,
    accuracy: ratio(tp + tn, probs.length),
    f1: ratio(2 * precision * recall, precision + recall),
    rewarded: ratio(tp + fp, probs.length),
    rewardOnSuccess: successes ? tp / successes : null,
    rewardOnFail: fails ? fp / fails : null,
  };
}

const pct = (v: number | null) => (v === null ? "–" : `${(v * 100).toFixed(1)}%`);
const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);

function plot(el: HTMLElement, title: string, xLabel: string, yLabel: string, xs: number[], series: { label: string; stroke: string; values: (number | null)[]; dash?: number[]; points?: boolean }[], xRange: [number, number] = [0, 1]) {
  const chart = new uPlot(
    {
      width: Math.max(260, el.clientWidth - 10), height: 240, title,
      scales: { x: { time: false, range: xRange }, y: { range: [0, 1] } },
      axes: themedAxes([{ label: xLabel }, { label: yLabel }]),
      series: [{ label: xLabel }, ...series.map((s) => ({ label: s.label, stroke: s.stroke, dash: s.dash, spanGaps: true, points: { show: s.points ?? false, size: 6 } }))],
      legend: { show: true },
    },
    [xs, ...series.map((s) => s.values)] as unknown as uPlot.AlignedData,
    el,
  );
  // follow the panel's width (columns settle after every model is laid out, and on window resizes)
  new ResizeObserver(() => {
    const width = Math.max(260, el.clientWidth - 10);
    if (Math.abs(width - chart.width) > 4) chart.setSize({ width, height: 240 });
  }).observe(el);
  return chart;
}

/** Decisions (probability > t) that differ between fp32 (the page's probabilities) and a reduced precision. */
export function flipsAt(reference: number[], other: number[], t: number): number {
  let flips = 0;
  for (let i = 0; i < other.length; i++) if ((reference[i] > t) !== (other[i] > t)) flips++;
  return flips;
}

/** bf16 and fp16 (a deployment's inference_precision) against fp32 on the same validation frames. */
function precisionPanel(ev: Evaluation): string {
  if (!ev.precisions.length) return "";
  const rows = ev.precisions.map((p) => p.refused
    ? `<tr data-precision="${p.precision}"><th>${p.precision}</th><td colspan="3" class="muted">not measured on ${esc(p.device)}: ${esc(p.refused)}</td></tr>`
    : `<tr data-precision="${p.precision}"><th>${p.precision}</th><td>${p.max_abs!.toExponential(2)}</td><td>${p.mean_abs!.toExponential(2)}</td><td data-flips></td></tr>`).join("");
  const first = ev.precisions[0];
  return `<div class="panel precision-panel"><h2>Inference precision against fp32</h2>
    <table class="precision"><tr><th></th><th>max |Δp|</th><th>mean |Δp|</th><th>decisions flipped</th></tr>${rows}</table>
    <p class="muted">On the first ${first.frames} validation frames, measured on ${esc(first.device)}: decisions
    (probability &gt; threshold) that differ from fp32's at the slider's threshold. A deployment's
    <code>inference_precision</code> picks one.</p></div>`;
}

function column(ev: Evaluation, index: number): HTMLElement {
  const col = document.createElement("div");
  col.className = "eval-column";
  col.dataset.model = String(ev.model.id);
  col.innerHTML = `
    <div class="panel"><h2>${esc(ev.model.name)}</h2>
      <p class="muted">${ev.summary.count} validation frames (${ev.summary.positives} success) of snapshot #${ev.snapshot.number}</p>
      ${sanityNotice(ev.summary.sanity)}
      ${ev.snapshot.split_warning ? `<p class="error split-warning">${esc(ev.snapshot.split_warning)}</p>` : ""}
      <div class="metrics">
        <div class="metric"><b data-metric="accuracy"></b><span>accuracy</span></div>
        <div class="metric"><b data-metric="precision"></b><span>precision</span></div>
        <div class="metric"><b data-metric="recall"></b><span>recall</span></div>
        <div class="metric"><b data-metric="f1"></b><span>F1</span></div>
        <div class="metric"><b>${ev.summary.roc.auc.toFixed(3)}</b><span>ROC AUC</span></div>
        <div class="metric"><b>${ev.summary.pr.average_precision.toFixed(3)}</b><span>average precision</span></div>
        <div class="metric"><b>${ev.summary.reliability.ece.toFixed(3)}</b><span>calibration error (ECE)</span></div>
      </div>
    </div>
    <div class="panel"><h2>Confusion matrix</h2>
      <table class="confusion"><tr><th></th><th>predicted success</th><th>predicted fail</th></tr>
        <tr><th>labeled success</th><td class="good" data-cell="tp"></td><td class="bad" data-cell="fn"></td></tr>
        <tr><th>labeled fail</th><td class="bad" data-cell="fp"></td><td class="good" data-cell="tn"></td></tr></table>
    </div>
    <div class="panel"><h2>What an RL run receives</h2><p class="rl-preview"></p></div>
    ${precisionPanel(ev)}
    <div class="eval-grid">
      <div class="panel"><div class="chart roc"></div></div>
      <div class="panel"><div class="chart pr"></div></div>
      <div class="panel"><div class="chart reliability"></div></div>
    </div>
    <div class="panel"><h2>Validation frames, most confidently wrong first</h2><div class="gallery"></div></div>`;
  root.querySelector(".eval-columns")!.appendChild(col);
  const roc = ev.summary.roc;
  plot(col.querySelector(".roc")!, `ROC (AUC ${roc.auc.toFixed(3)})`, "false positive rate", "true positive rate", roc.fpr, [
    { label: "ROC", stroke: "#3b6df0", values: roc.tpr },
    { label: "chance", stroke: "#aab", values: roc.fpr, dash: [4, 4] },
  ]);
  const pr = ev.summary.pr;
  const prOrder = pr.recall.map((r, i) => [r, pr.precision[i]]).sort((a, b) => a[0] - b[0]);
  plot(col.querySelector(".pr")!, `Precision-recall (AP ${pr.average_precision.toFixed(3)})`, "recall", "precision", prOrder.map((p) => p[0]), [
    { label: "precision", stroke: "#1f9d55", values: prOrder.map((p) => p[1]) },
  ]);
  const rel = ev.summary.reliability;
  plot(col.querySelector(".reliability")!, "Reliability", "predicted probability", "observed success rate", rel.bin_centers, [
    { label: "observed", stroke: "#d68f1f", values: rel.observed, points: true },
    { label: "perfect", stroke: "#aab", values: rel.bin_centers, dash: [4, 4] },
  ]);
  const gallery = col.querySelector(".gallery")!;
  gallery.innerHTML = ev.order.slice(0, GALLERY).map((i) => {
    const item = ev.items[i];
    const img = item.image ? `<img src="${esc(item.image)}" alt="step ${item.step}">` : "";
    const href = item.label_url ? ` href="${esc(item.label_url)}"` : "";
    return `<a${href} data-index="${i}" title="episode ${esc(item.episode)} step ${item.step}">${img}
      <div class="cap"><span>${item.label ? "success" : "fail"}</span><b>${item.probability.toFixed(2)}</b></div></a>`;
  }).join("");
  void index;
  return col;
}

function update(threshold: number): void {
  (document.getElementById("threshold-value") as HTMLElement).textContent = threshold.toFixed(2);
  // the page's "Deploy" link carries the threshold picked here to the deploy form
  const deploy = document.getElementById("deploy-link") as HTMLAnchorElement | null;
  if (deploy) deploy.href = `${deploy.href.split("?")[0]}?threshold=${threshold.toFixed(2)}`;
  data.evaluations.forEach((ev, i) => {
    const col = root.querySelectorAll<HTMLElement>(".eval-column")[i];
    const m = atThreshold(ev.probabilities, ev.labels, threshold);
    for (const key of ["accuracy", "precision", "recall", "f1"] as const) col.querySelector(`[data-metric=${key}]`)!.textContent = pct(m[key]);
    for (const key of ["tp", "fn", "fp", "tn"] as const) col.querySelector(`[data-cell=${key}]`)!.textContent = String(m[key]);
    col.querySelector(".rl-preview")!.innerHTML =
      `With <code>success = probability &gt; ${threshold.toFixed(2)}</code> and binary rewards (1.0 / 0.0), a run is rewarded on ` +
      `<b>${pct(m.rewarded)}</b> of these frames: <b>${pct(m.rewardOnSuccess)}</b> of the frames labeled success and ` +
      `<b>${pct(m.rewardOnFail)}</b> of the frames labeled fail (${m.fp} false rewards, ${m.fn} missed).`;
    for (const p of ev.precisions) {
      const cell = col.querySelector<HTMLElement>(`[data-precision=${p.precision}] [data-flips]`);
      if (cell) cell.textContent = `${flipsAt(ev.probabilities, p.probabilities, threshold)} of ${p.probabilities.length}`;
    }
    col.querySelectorAll<HTMLElement>(".gallery a").forEach((a) => {
      const idx = Number(a.dataset.index);
      a.classList.toggle("wrong", (ev.probabilities[idx] > threshold) !== (ev.labels[idx] === 1));
    });
  });
}

if (data.evaluations.length) {
  root.innerHTML = `<div class="panel threshold"><label for="threshold">Threshold</label>
    <input id="threshold" type="range" min="0" max="1" step="0.01" value="0.5"><b id="threshold-value">0.50</b>
    <span class="muted">success = probability &gt; threshold</span></div><div class="eval-columns"></div>`;
  data.evaluations.forEach(column);
  const slider = document.getElementById("threshold") as HTMLInputElement;
  slider.addEventListener("input", () => update(Number(slider.value)));
  update(0.5);
}

/** Mean accuracy per label count over the seeds of one order (null where no seed measured that count). */
export function meanCurve(runs: { labels: number[]; accuracy: number[] }[], xs: number[]): (number | null)[] {
  return xs.map((x) => {
    const values = runs.flatMap((r) => r.labels.flatMap((n, i) => (n === x ? [r.accuracy[i]] : [])));
    return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
  });
}

function labelEfficiency(el: HTMLElement, le: LabelEfficiencyData | null, command: string): void {
  if (!le) {
    el.innerHTML = `<div class="panel empty" data-testid="label-efficiency-empty"><h2>Label efficiency</h2>
      <p class="muted">Not measured for this project yet. Run <code>${esc(command)}</code> to measure how many labels
      the ranked queue needs against random order.</p></div>`;
    return;
  }
  const ranked = le.runs.filter((r) => r.order === "ranked"), random = le.runs.filter((r) => r.order === "random");
  const xs = [...new Set(le.runs.flatMap((r) => r.labels))].sort((a, b) => a - b);
  const count = (v: number | null) => (v === null ? "not reached" : `${Math.round(v)} labels`);
  // The labels needed are a mean over the seeds that got there: say how many did, or one lucky seed looks like a win.
  const reached = (runs: typeof ranked) =>
    `${runs.filter((r) => r.needed !== null).length} of ${runs.length} seeds reached it`;
  el.innerHTML = `<div class="panel" data-testid="label-efficiency"><h2>Label efficiency</h2>
    <p>To reach ${pct(le.target)} ${esc(le.metric)} (95% of the ${pct(le.all_labels_accuracy)} all labels give):
    ranked queue <b data-needed="ranked">${count(le.ranked_needed)}</b> (<span data-reached="ranked">${reached(ranked)}</span>),
    random order <b data-needed="random">${count(le.random_needed)}</b> (<span data-reached="random">${reached(random)}</span>);
    each is the mean over the seeds that reached it.</p><div class="chart"></div>
    <p class="muted">Measured ${esc(le.measured_at.slice(0, 16).replace("T", " "))} with <code>${esc(le.command)}</code>.</p></div>`;
  const chart = el.querySelector<HTMLElement>(".chart")!;
  plot(chart, `${le.metric} against labels`, "labels", le.metric, xs, [
    { label: "ranked queue", stroke: "#2f6fdb", values: meanCurve(ranked, xs), points: true },
    { label: "random order", stroke: "#d68f1f", values: meanCurve(random, xs), points: true },
    { label: "target", stroke: "#aab", values: xs.map(() => le.target), dash: [4, 4] },
  ], [xs[0] ?? 0, xs[xs.length - 1] ?? 1]);
}

const efficiencyRoot = document.getElementById("label-efficiency");
if (efficiencyRoot) labelEfficiency(efficiencyRoot, data.label_efficiency, data.label_efficiency_command);
