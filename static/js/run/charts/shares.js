// Budget shares per generation, stacked (a few SVG paths, not a bar per cell).
import { meta } from "../state.js";
import { plotConfig } from "./plotly.js";

export function drawShares() {
  const gens = meta.generations;
  const x = gens.map((g) => g.number);
  return Plotly.react("shares-chart", meta.agents.map((a) => ({
    type: "scatter", mode: "lines", stackgroup: "shares", name: a.name, x, y: gens.map((g) => (g.shares || {})[a.name] || 0),
    line: { width: 0.5, shape: "hv" }, hovertemplate: `${a.name}: %{y} at generation %{x}<extra></extra>`,
  })), { margin: { t: 10, r: 10, b: 35, l: 40 }, xaxis: { title: { text: "generation" }, automargin: true },
         yaxis: { title: { text: "candidates asked" } },
         // the legend at the foot of the figure, below the axis title, whatever the chart's height
         legend: { orientation: "h", yref: "container", y: 0, yanchor: "bottom" } }, plotConfig);
}
