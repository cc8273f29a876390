// Chart colours from the page's CSS variables (app.css), so canvases and uPlot's axes and grid follow the
// light or dark palette instead of uPlot's black defaults.
import type uPlot from "uplot";

/** The value of a CSS custom property on the document, or `fallback` where it is not set. */
export function cssVar(name: string, fallback: string): string {
  const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return value || fallback;
}

/** The given uPlot axes with label/tick-text colour from --axis and grid and tick lines from --grid. */
export function themedAxes(axes: uPlot.Axis[]): uPlot.Axis[] {
  const stroke = cssVar("--axis", "#667085");
  const grid = cssVar("--grid", "#e3e6ec");
  return axes.map((axis) => ({
    stroke,
    ...axis,
    grid: { stroke: grid, width: 1, ...axis.grid },
    ticks: { stroke: grid, width: 1, ...axis.ticks },
  }));
}
