// What every chart of the page passes to Plotly (the global from plotly.min.js).
export const plotConfig = { responsive: true, displaylogo: false };
