// The st.components.v2 script of fitcore_figure: a strategy's figure below the live view (DDP's and FSDP's
// shard grid), drawn with the plotly.js the live view's charts load, once per page. Streamlit's own
// st.plotly_chart brings a second plotly.js (4.7 MB, its PlotlyChart chunk) that a fresh page compiled
// beside ours: on a DDP page, Start was shown 3.7 s later than on a page without a figure.
//
// data = {figure: {data, layout}, config, assets, plotly}: dashboard/panels.py's figure_ui. Streamlit calls
// this on mount and on every rerun with new data, and the returned cleanup when the component unmounts.
// Like component.js, it runs from a blob: address and imports charts.js from the app's own route; only the
// latest call of a mount point draws, whichever import settles first.
export default function fitcoreFigure(component) {
  const { data, parentElement } = component;
  const spot = parentElement.querySelector(".fitcore-figure");
  const call = {};
  parentElement.fitcoreFigureCall = call;
  const { data: traces = [], layout = {} } = data.figure || {};
  const { template, ...own } = layout;  // plotly.py's template name: plotly.js takes an object or nothing
  spot.style.minHeight = `${own.height || 0}px`;  // its room before plotly.js is in: nothing below jumps
  const base = new URL(`${data.assets}/`, window.location.href);
  import(new URL("charts.js", base).href)
    .then(({ adoptPlotlyStyles, loadPlotly }) => loadPlotly(data.plotly).then((Plotly) => {
      if (parentElement.fitcoreFigureCall !== call) return;  // a newer call draws its own data
      adoptPlotlyStyles(parentElement);
      return Plotly.react(spot, traces, { ...own, autosize: true }, { ...data.config, responsive: true });
    }))
    .catch((error) => {
      if (parentElement.fitcoreFigureCall === call) spot.textContent = error.message;
    });
  return () => {
    if (parentElement.fitcoreFigureCall === call && window.Plotly) window.Plotly.purge(spot);
  };
}
