// The super-tile grid of each output tensor, coloured by owner node, and one super-tile's CTA grid.

let selected = null; // {grid, cell}
let selectedUnit = null;
const gridCanvases = [];

function stripes(ctx, x, y, w, h, color) {
  ctx.save();
  ctx.beginPath();
  ctx.rect(x, y, w, h);
  ctx.clip();
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let d = -h; d < w; d += 5) { ctx.moveTo(x + d, y + h); ctx.lineTo(x + d + h, y); }
  ctx.stroke();
  ctx.restore();
}

function cellLabel(grid, cell) {
  const region = cell.start.map((s, a) => s + ":" + (s + cell.shape[a])).join(", ");
  let text = grid.tensor + "[" + region + "]\nsuper-tile " + cell.index.join(", ") + " · node " + cell.node +
    " · unit " + cell.unit + " · generation " + cell.generation + (cell.stored ? "" : " · not stored");
  if (cell.replanned) {
    text += "\nre-planned" + (cell.previous.length ? " (before: " + cell.previous.map((p) =>
      "node " + p.node + " gen " + p.generation).join(", ") + ")" : "");
  }
  return text;
}

function drawGrid(entry) {
  const { grid, canvas, size } = entry;
  const ctx = setupCanvas(canvas, grid.cols * size + 1, grid.rows * size + 1);
  const gap = size >= 8 ? 1 : 0;
  grid.cells.forEach((cell) => {
    const x = cell.col * size + 0.5, y = cell.row * size + 0.5;
    ctx.fillStyle = nodeColor(cell.node);
    ctx.globalAlpha = cell.stored ? 1 : 0.45;
    ctx.fillRect(x, y, size - gap, size - gap);
    ctx.globalAlpha = 1;
    if (cell.replanned) stripes(ctx, x, y, size - gap, size - gap, "rgba(255,255,255,0.75)");
    if (selected && selected.cell === cell) {
      ctx.strokeStyle = "#111";
      ctx.lineWidth = 2;
      ctx.strokeRect(x + 1, y + 1, size - gap - 2, size - gap - 2);
    }
  });
}

function renderGrids() {
  const box = $("grids");
  const legend = $("legend");
  model.nodes.forEach((n) => legend.appendChild(el("span", null, [
    el("span", { className: "swatch", style: "background:" + nodeColor(n.node) }),
    "node " + n.node + (n.failed_at !== null ? " ✕" : "")])));
  legend.appendChild(el("span", null, [el("span", { className: "swatch",
    style: "background: repeating-linear-gradient(45deg,#888 0 2px,#fff 2px 4px)" }), "re-planned"]));
  let count = 0;
  if (!model.grids.length) box.appendChild(el("div", { text: "The trace names no units of work." }));
  const maxW = Math.max(200, $("grid-panel").clientWidth - 30);
  model.grids.forEach((grid) => {
    const size = Math.max(3, Math.min(56, Math.floor(maxW / grid.cols), Math.floor(300 / grid.rows)));
    const canvas = el("canvas", { className: "supergrid", "data-tensor": grid.tensor });
    const title = el("div", { className: "grid-title" }, [grid.tensor + " ", el("span", {
      text: grid.dtype + "[" + grid.shape.join(", ") + "] · " + grid.per_axis.join(" × ") + " super-tiles" +
        (grid.wrapped ? " (one strip, wrapped at " + grid.cols + ")" : ""),
    })]);
    const block = el("div", { className: "grid-block", "data-tensor": grid.tensor,
      "data-supertiles": grid.cells.length }, [title, canvas]);
    box.appendChild(block);
    const entry = { grid, canvas, size };
    gridCanvases.push(entry);
    const byPosition = new Map(grid.cells.map((c) => [c.row * grid.cols + c.col, c]));
    const at = (ev) => {
      const r = canvas.getBoundingClientRect();
      const col = Math.floor((ev.clientX - r.left) / size), row = Math.floor((ev.clientY - r.top) / size);
      return col >= 0 && col < grid.cols ? byPosition.get(row * grid.cols + col) || null : null;
    };
    canvas.addEventListener("mousemove", (ev) => {
      const cell = at(ev);
      if (cell) showTooltip(cellLabel(grid, cell), ev.clientX, ev.clientY); else hideTooltip();
    });
    canvas.addEventListener("mouseleave", hideTooltip);
    canvas.addEventListener("click", (ev) => { const cell = at(ev); if (cell) select(grid, cell); });
    drawGrid(entry);
    count += grid.cells.length;
  });
  root.dataset.supertiles = String(count);
  root.dataset.grids = String(model.grids.length);
}

function leafFor() {
  const leaves = model.leaves || [];
  return leaves.find((l) => l.name === "main") || leaves.find((l) => l.name === "step") || leaves[0] || null;
}

function select(grid, cell) {
  selected = { grid, cell };
  selectedUnit = cell.unit;
  gridCanvases.forEach(drawGrid);
  renderCta(grid, cell);
  if (timeline) timeline.draw();
}

function renderCta(grid, cell) {
  const box = $("cta");
  box.textContent = "";
  box.appendChild(el("div", { text: cellLabel(grid, cell).replace(/\n/g, " · ") }));
  const leaf = leafFor();
  if (!leaf) { box.appendChild(el("div", { text: "The trace names no leaf kernels." })); return; }
  const dims = leaf.grid || [1];
  const rows = dims[0] || 1, cols = dims.length > 1 ? dims[1] : 1, depth = dims.length > 2 ? dims[2] : 1;
  const ctas = dims.reduce((a, b) => a * b, 1);
  const others = (model.leaves || []).filter((l) => l !== leaf)
    .map((l) => l.name + " " + (l.grid || []).join(" × ")).join(", ");
  box.appendChild(el("div", { text: "leaf " + leaf.name + ": CTA grid " + dims.join(" × ") + " = " + ctas +
    " CTAs of " + (leaf.threads || "?") + " threads" + (depth > 1 ? " (z axis not drawn)" : "") +
    (others ? " · other leaves: " + others : "") }));
  // Grid axis x walks the tensor's first axis (rows), y its second (columns), as in the source.
  const rank1 = cell.shape.length === 1;
  const across = rank1 ? rows : cols, down = rank1 ? 1 : rows;
  // The box has the super-tile's proportions (rows : columns), kept between 1 : 4 and 1 : 1.
  const maxW = Math.min(320, Math.max(120, $("grid-panel").clientWidth - 40));
  const aspect = rank1 ? 0 : Math.min(1, Math.max(0.25, cell.shape[0] / cell.shape[1]));
  const W = maxW, H = rank1 ? 28 : Math.min(200, Math.round(maxW * aspect));
  const cw = W / across, ch = H / down;
  const canvas = el("canvas", { id: "cta-canvas", "data-ctas": ctas });
  box.appendChild(canvas);
  const ctx = setupCanvas(canvas, W + 1, H + 1);
  ctx.fillStyle = nodeColor(cell.node);
  ctx.globalAlpha = 0.25;
  ctx.fillRect(0.5, 0.5, W, H);
  ctx.globalAlpha = 1;
  // One line per CTA while lines stay 4 px apart; beyond that one line every `step` CTAs.
  const stepX = Math.max(1, Math.ceil(4 / cw)), stepY = rank1 ? 1 : Math.max(1, Math.ceil(4 / ch));
  ctx.strokeStyle = "rgba(0,0,0,0.45)";
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let i = 0; i <= across; i += stepX) { const x = Math.round(i * cw) + 0.5; ctx.moveTo(x, 0); ctx.lineTo(x, H + 0.5); }
  for (let j = 0; j <= down; j += stepY) { const y = Math.round(j * ch) + 0.5; ctx.moveTo(0, y); ctx.lineTo(W + 0.5, y); }
  ctx.stroke();
  ctx.strokeStyle = "#111";
  ctx.strokeRect(0.5, 0.5, W, H);
  if (stepX > 1 || stepY > 1) {
    const every = rank1 || stepX === stepY ? String(stepX) : stepY + " (down) × " + stepX + " (across)";
    box.appendChild(el("div", { className: "hint", text: "one line every " + every + " CTAs" }));
  }
  root.dataset.selectedUnit = String(cell.unit);
  root.dataset.ctaCount = String(ctas);
}
