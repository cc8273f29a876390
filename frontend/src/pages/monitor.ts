// Reward-hacking monitor of one deployment: false-success and false-fail rates over time, false success
// per RL run, served probabilities against the training set's, success rate per episode step, and frames the
// model flagged off its training distribution (OOD) over time.
// Data comes with the page (json_script) and is refreshed from the monitor API every 10 seconds.
import uPlot from "uplot";
import type { MonitorPageData } from "../generated/page-data";
import { api, pageData } from "../lib/api";
import { themedAxes } from "../lib/chart_theme";

type Rate = number | null;
type Data = MonitorPageData;

const COLORS = ["#c0392b", "#2471a3", "#1e8449", "#b9770e", "#7d3c98", "#117a65"];
const charts: uPlot[] = [];

// A chart with no point to draw says so (`empty`, when given) instead of showing bare axes.
function chart(
  id: string,
  x: { label: string; time: boolean },
  series: { label: string; values: Rate[] }[],
  xs: number[],
  empty = "",
) {
  const el = document.getElementById(id);
  if (!el) return;
  el.innerHTML = "";
  if (!series.some((s) => s.values.some((v) => v !== null && v !== undefined))) {
    if (empty) {
      const note = document.createElement("p");
      note.className = "muted empty-chart";
      note.textContent = empty;
      el.append(note);
    }
    return;
  }
  const c = new uPlot(
    {
      width: Math.max(240, el.clientWidth - 10), height: 220,
      scales: { x: { time: x.time }, y: { range: [0, 1] } },
      axes: themedAxes([{ label: x.label }, {}]),
      series: [{ label: x.label }, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], spanGaps: true, points: { show: true, size: 4 } }))],
    },
    [xs, ...series.map((s) => s.values)] as unknown as uPlot.AlignedData,
    el,
  );
  charts.push(c);
}

function normalise(counts: number[] | null): Rate[] {
  if (!counts) return [];
  const total = counts.reduce((a, b) => a + b, 0);
  return counts.map((c) => (total ? c / total : null));
}

function render(data: Data) {
  charts.splice(0).forEach((c) => c.destroy());
  const s = data.series;
  chart("rates-chart", { label: "time", time: true }, [
    { label: "false success (model yes, env no)", values: s.false_success_rate },
    { label: "false fail (model no, env yes)", values: s.false_fail_rate },
    { label: "model success rate", values: s.model_success_rate },
  ], s.times, "Nothing served in this window yet: the rates appear as RL workers ask this deployment for rewards " +
    "(false success and false fail need the env_success flags they send).");
  chart("runs-chart", { label: "time", time: true },
    Object.entries(s.run_false_success).map(([run, values]) => ({ label: run, values })), s.times);  // the table says why
  chart("ood-chart", { label: "time", time: true }, [
    { label: "off-distribution rate (flagged of checked)", values: s.ood_rate },
  ], s.times, s.ood_checked ? "" : "No frame checked yet: the rate appears once a model with OOD statistics serves.");
  const total = document.getElementById("ood-total");
  if (total) {
    total.textContent = s.ood_checked
      ? `${s.ood_total} of ${s.ood_checked} frames flagged off-distribution (${(100 * s.ood_total / s.ood_checked).toFixed(1)}%)`
      : "no frames checked";
    total.dataset.flagged = String(s.ood_total);
  }
  const centers = Array.from({ length: data.bins }, (_, i) => (i + 0.5) / data.bins);
  chart("hist-chart", { label: "probability", time: false }, [
    { label: "served", values: normalise(s.served_histogram) },
    { label: "training (val split)", values: normalise(data.training_histogram) },
  ], centers, "No frames served yet, and no validation split to compare them with.");
  chart("steps-chart", { label: "episode step", time: false }, [
    { label: "model success rate", values: data.steps.model_success_rate },
    { label: "env success rate", values: data.steps.env_success_rate },
  ], data.steps.steps, "No episode steps yet: send episode_ids (and env_success) with reward requests to see the " +
    "success rate at each step of an episode.");
}

const data = pageData("monitor");
render(data);
setInterval(async () => {
  try {
    render(await api<Data>(`/api/deployments/${encodeURIComponent(data.deployment)}/monitor`));
  } catch {
    /* keep the last view; the next refresh tries again */
  }
}, 10000);
