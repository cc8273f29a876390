// Runs page: several training jobs' curves of one metric on one chart, W&B-like: tick the runs, pick the metric,
// smooth with the slider (the raw points stay faint behind the smoothed line). The picks live in the URL.
import uPlot from "uplot";
import { api, pageData } from "../lib/api";
import { themedAxes } from "../lib/chart_theme";
import { smooth } from "../lib/smoothing";

interface Point { kind: "step" | "epoch"; step: number; epoch: number | null; [metric: string]: number | string | null; }

const PALETTE = ["#3b6df0", "#d64545", "#1f9d55", "#b7791f", "#805ad5", "#0f8a9d", "#d53f8c", "#4a5568", "#2f855a", "#c05621"];
const data = pageData("runs");
const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const metricSelect = $<HTMLSelectElement>("runs-metric");
const slider = $<HTMLInputElement>("runs-smoothing");
const chartEl = $<HTMLDivElement>("runs-chart");
const picked = new Set(data.picked);
const points = new Map<number, Point[]>(); // job id -> its curve points, fetched once
const color = (id: number) => PALETTE[data.runs.findIndex((r) => r.id === id) % PALETTE.length];
let chart: uPlot | null = null;
// for tests and the curious: what the chart shows
const probe = { x: [] as number[], series: [] as { job: number; raw: (number | null)[]; smoothed: (number | null)[] }[] };
(window as unknown as { __runs: typeof probe }).__runs = probe;

const params = new URLSearchParams(location.search);
metricSelect.value = params.get("metric") || metricSelect.value;
slider.value = String(data.smoothing);

function renderChoices(): void {
  $("runs-choices").replaceChildren(
    ...data.runs.map((run) => {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = String(run.id);
      box.checked = picked.has(run.id);
      box.disabled = !box.checked && picked.size >= 10;
      box.addEventListener("change", () => {
        if (box.checked) picked.add(run.id);
        else picked.delete(run.id);
        renderChoices();
        void update();
      });
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = picked.has(run.id) ? color(run.id) : "transparent";
      label.append(box, " ", swatch, ` ${run.name} `);
      const status = document.createElement("span");
      status.className = "muted";
      status.textContent = run.status;
      label.append(status);
      return label;
    }),
  );
}

async function curve(id: number): Promise<Point[]> {
  if (!points.has(id)) {
    const run = data.runs.find((r) => r.id === id)!;
    points.set(id, await api<Point[]>(run.metrics));
  }
  return points.get(id)!;
}

async function update(): Promise<void> {
  const metric = metricSelect.value;
  const weight = Number(slider.value);
  $("runs-smoothing-value").textContent = weight.toFixed(2);
  const query = new URLSearchParams({ jobs: [...picked].join(","), metric, smoothing: weight.toFixed(2) });
  history.replaceState(null, "", `?${query}`);
  const ids = data.runs.map((r) => r.id).filter((id) => picked.has(id));
  const curves = await Promise.all(ids.map(curve));
  const byStep = curves.map((pts) => new Map(pts.filter((p) => typeof p[metric] === "number").map((p) => [p.step, p[metric] as number])));
  const xs = [...new Set(byStep.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
  probe.x = xs;
  probe.series = ids.map((job, i) => {
    const own = xs.filter((x) => byStep[i].has(x)); // smoothed over the run's own points, then laid on the shared x
    const values = smooth(own.map((x) => byStep[i].get(x)!), weight);
    const smoothed = new Map(own.map((x, k) => [x, values[k]]));
    return { job, raw: xs.map((x) => byStep[i].get(x) ?? null), smoothed: xs.map((x) => smoothed.get(x) ?? null) };
  });
  draw(metric, ids);
  chartEl.dataset.ready = "1";
}

function draw(metric: string, ids: number[]): void {
  chart?.destroy();
  const name = (id: number) => data.runs.find((r) => r.id === id)!.name;
  const series: uPlot.Series[] = [{ label: "step" }];
  const columns: (number | null)[][] = [];
  probe.series.forEach((s, i) => {
    series.push({ label: `${name(ids[i])} (raw)`, stroke: `${color(ids[i])}40`, width: 1, spanGaps: true, points: { show: false } });
    series.push({ label: name(ids[i]), stroke: color(ids[i]), width: 2, spanGaps: true, points: { show: metric.startsWith("val"), size: 5 } });
    columns.push(s.raw, s.smoothed);
  });
  chart = new uPlot(
    {
      width: Math.max(280, chartEl.clientWidth - 10),
      height: 320,
      title: metric,
      scales: { x: { time: false } },
      axes: themedAxes([{ label: "step" }, {}]),
      series,
    },
    [probe.x, ...columns] as unknown as uPlot.AlignedData,
    chartEl,
  );
}

metricSelect.addEventListener("change", () => void update());
slider.addEventListener("input", () => void update());
window.addEventListener("resize", () => chart?.setSize({ width: Math.max(280, chartEl.clientWidth - 10), height: 320 }));
renderChoices();
void update();
