// Entry point: render every panel synchronously, then record in data-* attributes of #report
// what was drawn, so that a headless browser's DOM dump can be checked by tests.

// Self-test (#selftest): drive the page with synthetic input events, as a user would, and
// record what happened in data-selftest, so that a headless browser can check interaction.

function selfTest() {
  const out = {};
  $("view-single").click();
  out.singleHidden = root.dataset.clusterLineHidden;
  $("view-cluster").click();
  out.clusterHidden = root.dataset.clusterLineHidden;
  $("toggle-cluster-line").click();
  out.toggledHidden = root.dataset.clusterLineHidden;
  $("toggle-cluster-line").click();
  out.toggledBackHidden = root.dataset.clusterLineHidden;

  const canvas = timeline.canvas, rect = canvas.getBoundingClientRect();
  const mid = rect.left + (LABEL_W + rect.width) / 2, y = rect.top + AXIS_H + 10;
  const span0 = timeline.view.t1 - timeline.view.t0;
  canvas.dispatchEvent(new WheelEvent("wheel", { deltaY: -462, clientX: mid, clientY: y, bubbles: true,
    cancelable: true }));
  out.wheelZoom = (timeline.view.t1 - timeline.view.t0) / span0;
  const before = timeline.view.t0;
  canvas.dispatchEvent(new MouseEvent("mousedown", { clientX: mid, clientY: y, bubbles: true }));
  canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: mid - 100, clientY: y, bubbles: true }));
  window.dispatchEvent(new MouseEvent("mouseup", { clientX: mid - 100, clientY: y, bubbles: true }));
  out.dragMovedRight = timeline.view.t0 > before;
  canvas.dispatchEvent(new MouseEvent("dblclick", { clientX: mid, clientY: y, bubbles: true }));
  out.resetStart = timeline.view.t0;

  // Hover the middle of node row 0's first compute bar: the tooltip must describe it.
  const lane = timeline.lanes[0][KINDS.indexOf("compute")];
  if (lane.idx.length) {
    const i = lane.idx[0];
    const x = rect.left + timeline.X((ev.start[i] + ev.end[i]) / 2);
    canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: x, clientY: timeline.laneCenter(0, "compute", lane.slot[0]),
      bubbles: true }));
    out.tooltip = tooltip.hidden ? "" : tooltip.textContent.split("\n")[0];
    out.expected = "compute #" + ev.id[i] + " on node " + ev.node[i];
    hideTooltip();
  }
  // Click the last super-tile of the first grid: it becomes the selection.
  const entry = gridCanvases[0];
  if (entry) {
    const cell = entry.grid.cells[entry.grid.cells.length - 1];
    const r = entry.canvas.getBoundingClientRect();
    entry.canvas.dispatchEvent(new MouseEvent("click", { clientX: r.left + (cell.col + 0.5) * entry.size,
      clientY: r.top + (cell.row + 0.5) * entry.size, bubbles: true }));
    out.clickedUnit = root.dataset.selectedUnit;
    out.expectedUnit = String(cell.unit);
  }
  root.dataset.selftest = JSON.stringify(out);
}

// Render everything, synchronously, then record what was drawn.

renderHeader();
renderSummary();
renderCode();
// The URL fragment may choose the view and the time range: #view=single&zoom=0.1,0.2 (seconds).
const params = new URLSearchParams(location.hash.replace(/^#/, ""));
const startView = params.get("view") === "single" ? "single" : "cluster";
$("view-single").addEventListener("click", () => setView("single"));
$("view-cluster").addEventListener("click", () => setView("cluster"));
// #cluster-line=shown shows the @cluster line from the start; the toggle flips it.
$("toggle-cluster-line").addEventListener("click", () =>
  setClusterLine(document.body.dataset.clusterLine !== "shown"));
setClusterLine(params.get("cluster-line") === "shown");
setView(startView);
renderGrids();
renderBytes();
renderFailures();
timeline = makeTimeline();
if (model.grids.length && model.grids[0].cells.length) select(model.grids[0], model.grids[0].cells[0]);
const zoom = (params.get("zoom") || "").split(",").map(Number);
if (zoom.length === 2 && zoom.every(Number.isFinite)) timeline.setRange(zoom[0], zoom[1]);
if (params.has("selftest")) selfTest();
root.dataset.nodes = String(model.nodes.length);
root.dataset.events = String(summary.events);
root.dataset.serves = String(summary.serves);
root.dataset.rendered = "true";
