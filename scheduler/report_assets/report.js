// The phobos run report: lays out the model that scheduler/report_model.py derived from a trace.
// Plain DOM + canvas, no library. The timeline is one canvas (bars narrower than a pixel are
// summed into per-pixel columns), so a run of 10,000+ instructions keeps the DOM small.
// After rendering, the page writes what it drew into data-* attributes of #report so that a
// headless browser's DOM dump can be checked by tests.
(function () {
  "use strict";

  const model = JSON.parse(document.getElementById("trace-data").textContent);
  const root = document.getElementById("report");
  const $ = (id) => document.getElementById(id);

  const KINDS = model.kinds;
  const KIND_COLORS = {
    allocate: "#9ca3af", load: "#3b82f6", fetch: "#14b8a6", compute: "#f59e0b", store: "#8b5cf6", free: "#cbd5e1",
  };
  const FAIL = "#dc2626";
  const REPLAN = "#db2777";
  const NODE_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#7f7f7f"];

  function nodeColor(node) {
    if (node === null || node === undefined) return "#d1d5db";
    if (node < NODE_PALETTE.length) return NODE_PALETTE[node];
    return "hsl(" + ((node * 137.508) % 360).toFixed(1) + ", 55%, 55%)";
  }

  // ------------------------------------------------------------------------------------------
  // Formatting
  // ------------------------------------------------------------------------------------------

  function fmtBytes(n) {
    if (!n) return "0 B";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(n >= 100 ? 0 : n >= 10 ? 1 : 2)) + " " + units[i];
  }

  function fmtTime(s) {
    const a = Math.abs(s);
    if (a === 0) return "0 s";
    if (a >= 1) return s.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 3) + " s";
    if (a >= 1e-3) return (s * 1e3).toFixed(a >= 0.1 ? 0 : a >= 0.01 ? 1 : 2) + " ms";
    if (a >= 1e-6) return (s * 1e6).toFixed(a >= 1e-4 ? 0 : a >= 1e-5 ? 1 : 2) + " µs";
    return (s * 1e9).toFixed(0) + " ns";
  }

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k in attrs) {
        if (k === "text") e.textContent = attrs[k];
        else if (k === "className") e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      }
    }
    (children || []).forEach((c) => e.appendChild(typeof c === "string" ? document.createTextNode(c) : c));
    return e;
  }

  function escapeHtml(s) {
    return s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  }

  function fmtPairs(obj) {
    const keys = Object.keys(obj || {});
    return keys.length ? keys.map((k) => k + " = " + obj[k]).join(", ") : "none";
  }

  const tooltip = $("tooltip");
  function showTooltip(text, x, y) {
    tooltip.textContent = text;
    tooltip.hidden = false;
    const w = tooltip.offsetWidth, h = tooltip.offsetHeight;
    tooltip.style.left = Math.min(x + 14, window.innerWidth - w - 4) + "px";
    tooltip.style.top = (y + 16 + h > window.innerHeight ? y - h - 8 : y + 16) + "px";
  }
  function hideTooltip() { tooltip.hidden = true; }

  // ------------------------------------------------------------------------------------------
  // Header and summary
  // ------------------------------------------------------------------------------------------

  const summary = model.summary;
  const failedNodes = model.nodes.filter((n) => n.failed_at !== null);

  function renderHeader() {
    $("title").textContent = "phobos run: " + (model.kernel || "kernel");
    document.title = $("title").textContent;
    $("headline").textContent = model.nodes.length + " node" + (model.nodes.length === 1 ? "" : "s") +
      " · " + summary.events + " instructions · " + model.super_tiles + " super-tiles · wall " +
      fmtTime(summary.wall_s) + (failedNodes.length ? " · " + failedNodes.length + " node failure" +
      (failedNodes.length === 1 ? "" : "s") : "");
  }

  function renderSummary() {
    const t = summary.totals;
    const figures = [
      ["wall time", fmtTime(summary.wall_s)], ["nodes", String(model.nodes.length)],
      ["instructions", String(summary.events)], ["super-tiles", String(model.super_tiles)],
      ["loaded", fmtBytes(t.bytes_loaded)], ["fetched", fmtBytes(t.bytes_fetched)],
      ["stored", fmtBytes(t.bytes_stored)], ["compute (sum)", fmtTime(t.compute_s)],
      ["failures", String(summary.failures)], ["re-planned instr.", String(summary.replanned_events)],
    ];
    const box = el("div", { className: "figures" }, figures.map(([k, v]) =>
      el("div", { className: "figure" }, [el("div", { className: "v", text: v }), el("div", { className: "k", text: k })])));
    const head = ["node", "backend / device", "instructions", "loaded", "fetched", "served", "stored",
      "compute", "compute / wall", "status"];
    const table = el("table", { id: "summary-table" }, [el("tr", null, head.map((h) => el("th", { text: h })))]);
    const byNode = {};
    model.nodes.forEach((n) => { byNode[n.node] = n; });
    summary.nodes.forEach((r) => {
      const n = byNode[r.node] || {};
      const status = n.failed_at !== null && n.failed_at !== undefined
        ? "failed at " + fmtTime(n.failed_at) : "ok";
      const busy = summary.wall_s > 0 ? (100 * r.compute_s / summary.wall_s).toFixed(1) + " %" : "";
      const tr = el("tr", { "data-node": r.node, className: status === "ok" ? "" : "failed" }, [
        el("td", null, [el("span", { className: "swatch", style: "background:" + nodeColor(r.node) }),
          "node " + r.node]),
        el("td", { text: [n.backend, n.device].filter(Boolean).join(" · ") }),
        el("td", { text: String(r.instructions) }), el("td", { text: fmtBytes(r.bytes_loaded) }),
        el("td", { text: fmtBytes(r.bytes_fetched) }), el("td", { text: fmtBytes(r.bytes_served) }),
        el("td", { text: fmtBytes(r.bytes_stored) }), el("td", { text: fmtTime(r.compute_s) }),
        el("td", { text: busy }), el("td", { text: status }),
      ]);
      table.appendChild(tr);
    });
    $("summary").append(box, table);
  }

  // ------------------------------------------------------------------------------------------
  // Code panel: syntax colouring and the single-GPU / cluster views
  // ------------------------------------------------------------------------------------------

  const KEYWORDS = new Set("kernel let var for in range and or not true false inf if else return".split(" "));
  const TYPES = new Set("tensor tile f32 f16 bf16 i32 bool".split(" "));
  const BUILTINS = new Set("dot transpose exp log sqrt abs max min sum where arange expand full load".split(" "));
  const TOKEN = /(\/\/.*$)|(@[A-Za-z_]\w*)|(\d+\.\d*(?:[eE][+-]?\d+)?|\d+(?:[eE][+-]?\d+)?)|([A-Za-z_]\w*)/g;

  function highlight(line) {
    let out = "", last = 0, m;
    TOKEN.lastIndex = 0;
    while ((m = TOKEN.exec(line)) !== null) {
      out += escapeHtml(line.slice(last, m.index));
      let cls = null;
      if (m[1]) cls = "comment";
      else if (m[2]) cls = "attr";
      else if (m[3]) cls = /\w/.test(line[m.index - 1] || "") ? null : "number";
      else if (KEYWORDS.has(m[4])) cls = "keyword";
      else if (TYPES.has(m[4])) cls = "type";
      else if (BUILTINS.has(m[4]) && /^\s*\(/.test(line.slice(m.index + m[0].length))) cls = "builtin";
      else if (m[4] === "ctx") cls = "ctx";
      const text = escapeHtml(m[0]);
      out += cls ? '<span class="tok-' + cls + '">' + text + "</span>" : text;
      last = m.index + m[0].length;
    }
    return out + escapeHtml(line.slice(last));
  }

  // The @cluster attribute's lines: from a line starting with @cluster until its parentheses close.
  function clusterLines(lines) {
    const found = new Set();
    for (let i = 0; i < lines.length; i++) {
      if (!/^\s*@cluster\b/.test(lines[i])) continue;
      let depth = 0, j = i;
      for (; j < lines.length; j++) {
        found.add(j);
        const code = lines[j].replace(/\/\/.*$/, "");
        depth += (code.match(/\(/g) || []).length - (code.match(/\)/g) || []).length;
        if (depth <= 0) break;
      }
      i = j;
    }
    return found;
  }

  let clusterLineElements = [];

  function renderCode() {
    const lines = model.source.replace(/\r\n?/g, "\n").replace(/\n$/, "").split("\n");
    const attr = clusterLines(lines);
    const pre = $("code");
    pre.innerHTML = lines.map((line, i) =>
      '<span class="code-line' + (attr.has(i) ? " cluster-attr" : "") + '" data-line="' + (i + 1) + '">' +
      '<span class="ln">' + (i + 1) + "</span>" + highlight(line) + "</span>").join("");
    clusterLineElements = Array.from(pre.querySelectorAll(".cluster-attr"));
    root.dataset.codeLines = String(lines.length);
    root.dataset.clusterLines = String(clusterLineElements.length);
  }

  function renderValues(view) {
    const box = $("values");
    box.textContent = "";
    const add = (label, obj) => box.appendChild(el("div", null, [label + ": ", el("code", { text: fmtPairs(obj) })]));
    add("dims", model.dims);
    if (Object.keys(model.scalars || {}).length) add("scalars", model.scalars);
    if (view === "cluster") {
      add("@cluster (super-tile) values", model.cluster_values);
      add("leaf @autotune values", model.tile_values);
      box.appendChild(el("div", { text: "super-tile grid: " + (model.super_grid || []).join(" × ") }));
    } else {
      add("@autotune values", model.tile_values);
      box.appendChild(el("div", { text: "On one GPU the kernel compiles with its @autotune values as if " +
        "the @cluster line were not there." }));
    }
  }

  function setView(view) {
    document.body.dataset.view = view;
    $("view-single").classList.toggle("active", view === "single");
    $("view-cluster").classList.toggle("active", view === "cluster");
    $("view-label").textContent = view === "single" ? "· single-GPU view" : "· cluster view";
    const hidden = clusterLineElements.length > 0 &&
      clusterLineElements.every((e) => getComputedStyle(e).display === "none");
    root.dataset.view = view;
    root.dataset.clusterLineHidden = String(hidden);
    renderValues(view);
  }

  // ------------------------------------------------------------------------------------------
  // Super-tile grids and the CTA grid of one super-tile
  // ------------------------------------------------------------------------------------------

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

  function setupCanvas(canvas, width, height) {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(width * dpr));
    canvas.height = Math.max(1, Math.round(height * dpr));
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
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
      const at = (ev) => {
        const r = canvas.getBoundingClientRect();
        const col = Math.floor((ev.clientX - r.left) / size), row = Math.floor((ev.clientY - r.top) / size);
        return grid.cells.find((c) => c.row === row && c.col === col) || null;
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
    const maxW = Math.min(360, Math.max(120, $("grid-panel").clientWidth - 40));
    const cs = rank1 ? maxW / across : Math.min(maxW / across, 220 / down);
    const W = cs * across, H = rank1 ? 28 : cs * down;
    const canvas = el("canvas", { id: "cta-canvas", "data-ctas": ctas });
    box.appendChild(canvas);
    const ctx = setupCanvas(canvas, W + 1, H + 1);
    ctx.fillStyle = nodeColor(cell.node);
    ctx.globalAlpha = 0.25;
    ctx.fillRect(0.5, 0.5, W, H);
    ctx.globalAlpha = 1;
    // One line per CTA while lines stay 4 px apart; beyond that one line every `step` CTAs.
    const step = Math.max(1, Math.ceil(4 / cs));
    ctx.strokeStyle = "rgba(0,0,0,0.45)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let i = 0; i <= across; i += step) { const x = Math.round(i * cs) + 0.5; ctx.moveTo(x, 0); ctx.lineTo(x, H + 0.5); }
    if (!rank1) {
      for (let j = 0; j <= down; j += step) { const y = Math.round(j * cs) + 0.5; ctx.moveTo(0, y); ctx.lineTo(W + 0.5, y); }
    }
    ctx.stroke();
    ctx.strokeStyle = "#111";
    ctx.strokeRect(0.5, 0.5, W, H);
    if (step > 1) box.appendChild(el("div", { className: "hint", text: "one line every " + step + " CTAs" }));
    root.dataset.selectedUnit = String(cell.unit);
    root.dataset.ctaCount = String(ctas);
  }

  // ------------------------------------------------------------------------------------------
  // Timeline
  // ------------------------------------------------------------------------------------------

  const ev = model.events;
  const nEvents = ev.node.length;
  const LANES = ["load", "fetch", "compute", "store"];
  const LABEL_W = 170, AXIS_H = 26, LANE_H = 11, LANE_GAP = 2, MEM_H = 5, ROW_PAD = 7;
  let timeline = null;

  function buildLanes() {
    // lanes[nodeIndex][kindIndex] = event indices sorted by start; maxDur bounds the search window.
    const index = {};
    model.nodes.forEach((n, i) => { index[n.node] = i; });
    const lanes = model.nodes.map(() => KINDS.map(() => []));
    for (let i = 0; i < nEvents; i++) lanes[index[ev.node[i]]][ev.kind[i]].push(i);
    return lanes.map((row) => row.map((list) => {
      list.sort((a, b) => ev.start[a] - ev.start[b]);
      let maxDur = 0;
      list.forEach((i) => { maxDur = Math.max(maxDur, ev.end[i] - ev.start[i]); });
      return { idx: Int32Array.from(list), maxDur };
    }));
  }

  function firstAtOrAfter(lane, t) {
    let lo = 0, hi = lane.idx.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (ev.start[lane.idx[mid]] < t) lo = mid + 1; else hi = mid; }
    return lo;
  }

  function niceStep(span, target) {
    const raw = span / target, p = Math.pow(10, Math.floor(Math.log10(raw)));
    const m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }

  function eventText(i) {
    const kind = KINDS[ev.kind[i]];
    const lines = [kind + " #" + ev.id[i] + " on node " + ev.node[i] + (ev.ok[i] ? "" : "  (FAILED)"),
      "start " + fmtTime(ev.start[i]) + " · end " + fmtTime(ev.end[i]) + " · " + fmtTime(ev.end[i] - ev.start[i])];
    if (ev.bytes[i]) lines.push(fmtBytes(ev.bytes[i]) + (kind === "load" || kind === "fetch"
      ? " from " + (ev.peer[i] >= 0 ? "node " + ev.peer[i] : "storage") : kind === "store" ? " to storage" : ""));
    else if (ev.peer[i] >= 0) lines.push("peer node " + ev.peer[i]);
    if (ev.unit[i] >= 0) lines.push("unit " + ev.unit[i] + (ev.leaf[i] >= 0 ? " · leaf " + ev.events_leaf_name(i) : ""));
    else if (ev.leaf[i] >= 0) lines.push("leaf " + ev.events_leaf_name(i));
    lines.push("generation " + ev.generation[i] + (ev.replanned[i] ? " · re-planned after a failure" : ""));
    return lines.join("\n");
  }
  ev.events_leaf_name = (i) => ev.leaf_names[ev.leaf[i]];

  function makeTimeline() {
    const canvas = $("timeline");
    const wrap = $("timeline-wrap");
    const lanes = buildLanes();
    let lastEnd = 0;
    for (let i = 0; i < nEvents; i++) lastEnd = Math.max(lastEnd, ev.end[i]);
    const fullEnd = Math.max(summary.wall_s || 0, lastEnd,
      ...model.nodes.map((n) => n.failed_at || 0), 1e-6);
    const view = { t0: 0, t1: fullEnd * 1.01 };
    let showMemory = false;
    let drawn = { bars: 0, columns: 0, rows: 0 };

    function laneLayout() {
      const list = LANES.map((k) => ({ kind: KINDS.indexOf(k), h: LANE_H }));
      if (showMemory) {
        list.push({ kind: KINDS.indexOf("allocate"), h: MEM_H }, { kind: KINDS.indexOf("free"), h: MEM_H });
      }
      let y = ROW_PAD;
      list.forEach((l) => { l.y = y; y += l.h + LANE_GAP; });
      return { list, rowH: y + ROW_PAD - LANE_GAP };
    }

    let layout = laneLayout();
    let width = 0, height = 0, ctx = null, pending = false;
    const stripeCache = {};

    function size() {
      width = Math.max(400, wrap.clientWidth);
      height = AXIS_H + model.nodes.length * layout.rowH + 4;
      ctx = setupCanvas(canvas, width, height);
    }

    const X = (t) => LABEL_W + (t - view.t0) / (view.t1 - view.t0) * (width - LABEL_W - 8);
    const T = (x) => view.t0 + (x - LABEL_W) / (width - LABEL_W - 8) * (view.t1 - view.t0);

    function stripePattern(color) {
      if (stripeCache[color]) return stripeCache[color];
      const p = document.createElement("canvas");
      p.width = p.height = 6;
      const c = p.getContext("2d");
      c.fillStyle = color;
      c.fillRect(0, 0, 6, 6);
      c.strokeStyle = "rgba(255,255,255,0.8)";
      c.lineWidth = 1.5;
      c.beginPath(); c.moveTo(0, 6); c.lineTo(6, 0); c.moveTo(-1, 1); c.lineTo(1, -1); c.moveTo(5, 7); c.lineTo(7, 5);
      c.stroke();
      return (stripeCache[color] = ctx.createPattern(p, "repeat"));
    }

    function drawAxis() {
      const span = view.t1 - view.t0;
      const step = niceStep(span, Math.max(3, (width - LABEL_W) / 110));
      ctx.fillStyle = "#6b7385";
      ctx.font = "11px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      ctx.strokeStyle = "#eef0f4";
      ctx.lineWidth = 1;
      for (let t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
        const x = Math.round(X(t)) + 0.5;
        ctx.beginPath(); ctx.moveTo(x, AXIS_H - 4); ctx.lineTo(x, height); ctx.stroke();
        ctx.fillText(fmtTime(t), x + 3, AXIS_H / 2);
      }
    }

    function drawLane(nodeIdx, laneInfo, y0, h, cover, repCover) {
      const lane = lanes[nodeIdx][laneInfo.kind];
      const color = KIND_COLORS[KINDS[laneInfo.kind]];
      const left = LABEL_W, right = width - 8;
      cover.fill(0); repCover.fill(0);
      let any = false;
      for (let k = firstAtOrAfter(lane, view.t0 - lane.maxDur); k < lane.idx.length; k++) {
        const i = lane.idx[k];
        if (ev.start[i] > view.t1) break;
        if (ev.end[i] < view.t0) continue;
        const x0 = Math.max(left, X(ev.start[i])), x1 = Math.min(right, X(ev.end[i]));
        if (x1 - x0 >= 1.5) {
          ctx.fillStyle = ev.replanned[i] ? stripePattern(color) : color;
          ctx.fillRect(x0, y0, x1 - x0, h);
          if (!ev.ok[i] || ev.replanned[i] || ev.unit[i] === selectedUnit && selectedUnit !== null) {
            ctx.strokeStyle = !ev.ok[i] ? FAIL : ev.unit[i] === selectedUnit ? "#111" : REPLAN;
            ctx.lineWidth = 1;
            ctx.strokeRect(x0 + 0.5, y0 + 0.5, Math.max(0, x1 - x0 - 1), h - 1);
          }
          drawn.bars++;
        } else {
          // Sub-pixel bar: add its width to its pixel column; drawn below as one column.
          const px = Math.min(cover.length - 1, Math.max(0, Math.floor(x0 - left)));
          cover[px] += Math.max(0.2, x1 - x0);
          if (ev.replanned[i]) repCover[px] += 1;
          any = true;
        }
      }
      if (!any) return;
      ctx.fillStyle = color;
      for (let px = 0; px < cover.length; px++) {
        if (!cover[px]) continue;
        ctx.globalAlpha = Math.min(1, 0.35 + 0.65 * cover[px]);
        ctx.fillRect(left + px, y0, 1, h);
        drawn.columns++;
      }
      ctx.globalAlpha = 1;
      ctx.fillStyle = REPLAN;
      for (let px = 0; px < repCover.length; px++) if (repCover[px]) ctx.fillRect(left + px, y0 - 1, 1, 2);
    }

    function draw() {
      pending = false;
      drawn = { bars: 0, columns: 0, rows: 0 };
      ctx.setTransform(window.devicePixelRatio || 1, 0, 0, window.devicePixelRatio || 1, 0, 0);
      ctx.clearRect(0, 0, width, height);
      drawAxis();
      const cover = new Float32Array(Math.max(1, Math.ceil(width - LABEL_W))), repCover = new Uint16Array(cover.length);
      model.nodes.forEach((node, r) => {
        const top = AXIS_H + r * layout.rowH;
        ctx.fillStyle = r % 2 ? "rgba(240,242,246,0.6)" : "rgba(255,255,255,0)";
        ctx.fillRect(0, top, width, layout.rowH);
        ctx.fillStyle = nodeColor(node.node);
        ctx.fillRect(4, top + 6, 5, layout.rowH - 12);
        ctx.fillStyle = "#1d2330";
        ctx.font = "600 12px system-ui, sans-serif";
        ctx.textBaseline = "top";
        ctx.fillText("node " + node.node, 14, top + 6);
        ctx.font = "11px system-ui, sans-serif";
        ctx.fillStyle = "#6b7385";
        const label = [node.backend, node.device].filter(Boolean).join(" · ");
        ctx.fillText(label.length > 24 ? label.slice(0, 23) + "…" : label, 14, top + 21);
        layout.list.forEach((laneInfo) => {
          ctx.fillStyle = "#a0a7b4";
          ctx.font = "9px system-ui, sans-serif";
          if (laneInfo.h >= LANE_H) ctx.fillText(KINDS[laneInfo.kind], LABEL_W - 44, top + laneInfo.y + 1);
          drawLane(r, laneInfo, top + laneInfo.y, laneInfo.h, cover, repCover);
        });
        if (node.failed_at !== null) {
          const x = X(node.failed_at);
          if (x <= width - 8) {
            const xs = Math.max(LABEL_W, x);
            ctx.fillStyle = "rgba(220,38,38,0.08)";
            ctx.fillRect(xs, top, width - 8 - xs, layout.rowH);
            if (x >= LABEL_W) {
              ctx.fillStyle = FAIL;
              ctx.fillRect(x - 1, top, 2, layout.rowH);
              ctx.font = "600 11px system-ui, sans-serif";
              ctx.fillText("✕ failed " + fmtTime(node.failed_at), x + 4, top + layout.rowH - 14);
            }
          }
          ctx.fillStyle = FAIL;
          ctx.font = "600 11px system-ui, sans-serif";
          ctx.fillText("✕ failed", 14, top + 35);
        }
        drawn.rows++;
      });
      ctx.strokeStyle = "#dde1e8";
      ctx.beginPath(); ctx.moveTo(LABEL_W - 0.5, 0); ctx.lineTo(LABEL_W - 0.5, height); ctx.stroke();
      $("zoom-range").textContent = fmtTime(view.t0) + " – " + fmtTime(view.t1);
      root.dataset.nodeRows = String(drawn.rows);
      root.dataset.timelineBars = String(drawn.bars);
      root.dataset.timelineColumns = String(drawn.columns);
      root.dataset.zoomStart = String(view.t0);
      root.dataset.zoomEnd = String(view.t1);
    }

    function schedule() { if (!pending) { pending = true; requestAnimationFrame(draw); } }

    function zoom(factor, atX) {
      const tm = T(atX), full = fullEnd * 1.01;
      const span = Math.min(full * 4, Math.max(1e-7, (view.t1 - view.t0) * factor));
      const frac = (atX - LABEL_W) / (width - LABEL_W - 8);
      view.t0 = tm - frac * span;
      view.t1 = view.t0 + span;
      schedule();
    }

    function hit(mx, my) {
      const r = Math.floor((my - AXIS_H) / layout.rowH);
      if (r < 0 || r >= model.nodes.length || mx < LABEL_W) return -1;
      const yIn = my - AXIS_H - r * layout.rowH;
      const laneInfo = layout.list.find((l) => yIn >= l.y - 1 && yIn <= l.y + l.h + 1);
      if (!laneInfo) return -1;
      const lane = lanes[r][laneInfo.kind];
      const t = T(mx), tol = 3 * (view.t1 - view.t0) / (width - LABEL_W);
      let best = -1, bestD = Infinity;
      for (let k = firstAtOrAfter(lane, t - tol - lane.maxDur); k < lane.idx.length; k++) {
        const i = lane.idx[k];
        if (ev.start[i] > t + tol) break;
        if (ev.end[i] < t - tol) continue;
        const d = Math.abs((ev.start[i] + ev.end[i]) / 2 - t);
        if (d < bestD) { bestD = d; best = i; }
      }
      return best;
    }

    let drag = null;
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = canvas.getBoundingClientRect();
      zoom(Math.exp(e.deltaY * 0.0015), Math.max(LABEL_W, e.clientX - r.left));
    }, { passive: false });
    canvas.addEventListener("mousedown", (e) => { drag = { x: e.clientX, t0: view.t0, t1: view.t1 }; hideTooltip(); });
    window.addEventListener("mouseup", () => { drag = null; });
    canvas.addEventListener("mousemove", (e) => {
      const r = canvas.getBoundingClientRect();
      if (drag) {
        const dt = (e.clientX - drag.x) / (width - LABEL_W - 8) * (drag.t1 - drag.t0);
        view.t0 = drag.t0 - dt; view.t1 = drag.t1 - dt;
        schedule();
        return;
      }
      const i = hit(e.clientX - r.left, e.clientY - r.top);
      if (i >= 0) showTooltip(eventText(i), e.clientX, e.clientY); else hideTooltip();
    });
    canvas.addEventListener("mouseleave", hideTooltip);
    canvas.addEventListener("dblclick", () => { view.t0 = 0; view.t1 = fullEnd * 1.01; schedule(); });
    $("zoom-in").addEventListener("click", () => zoom(0.5, (LABEL_W + width) / 2));
    $("zoom-out").addEventListener("click", () => zoom(2, (LABEL_W + width) / 2));
    $("zoom-reset").addEventListener("click", () => { view.t0 = 0; view.t1 = fullEnd * 1.01; schedule(); });
    $("show-memory").addEventListener("change", (e) => {
      showMemory = e.target.checked; layout = laneLayout(); size(); draw();
    });
    window.addEventListener("resize", () => { size(); draw(); });

    const legend = $("kind-legend");
    KINDS.forEach((k) => legend.appendChild(el("span", null, [
      el("span", { className: "swatch", style: "background:" + KIND_COLORS[k] }), k + " "])));
    legend.appendChild(el("span", null, [el("span", { className: "swatch",
      style: "background: repeating-linear-gradient(45deg," + REPLAN + " 0 2px,#fff 2px 4px)" }), "re-planned "]));
    legend.appendChild(el("span", null, [el("span", { className: "swatch", style: "background:" + FAIL }),
      "node failure"]));

    size();
    draw();
    return { draw: schedule, hit, view, X };
  }

  // ------------------------------------------------------------------------------------------
  // Bytes matrix and failures
  // ------------------------------------------------------------------------------------------

  function renderBytes() {
    const m = model.bytes;
    const max = Math.max(1, ...m.values.flat());
    const table = el("table", { id: "bytes-table" },
      [el("tr", null, [el("th", { text: "from \\ to" }), ...m.destinations.map((d) => el("th", { text: d })),
        el("th", { text: "total" })])]);
    m.sources.forEach((s, r) => {
      const row = m.values[r];
      const cells = row.map((v) => {
        const td = el("td", { text: v ? fmtBytes(v) : "·", "data-bytes": v });
        if (v) td.style.background = "rgba(59,130,246," + (0.08 + 0.5 * v / max).toFixed(3) + ")";
        return td;
      });
      table.appendChild(el("tr", null, [el("td", { text: s }), ...cells,
        el("td", { text: fmtBytes(row.reduce((a, b) => a + b, 0)) })]));
    });
    $("bytes").appendChild(table);
    $("bytes").appendChild(el("div", { className: "hint", text: "storage → node: loads · node → node: " +
      "fetches from a peer · node → storage: stores. Completed instructions only." }));
  }

  function renderFailures() {
    const box = $("failures");
    const replannedCells = model.grids.reduce((n, g) => n + g.cells.filter((c) => c.replanned).length, 0);
    root.dataset.failures = String(model.failures.length);
    root.dataset.replannedEvents = String(summary.replanned_events);
    root.dataset.replannedSupertiles = String(replannedCells);
    if (!model.failures.length) {
      box.appendChild(el("div", { text: "No node failed during this run." }));
      return;
    }
    const list = el("ul", { id: "failure-list" });
    model.failures.forEach((f) => list.appendChild(el("li", { className: "failure", "data-node": f.node,
      text: "node " + f.node + " failed at " + fmtTime(f.time) + (f.reason ? ": " + f.reason : "") })));
    box.appendChild(list);
    box.appendChild(el("div", { className: "replanned", text: replannedCells + " super-tile" +
      (replannedCells === 1 ? "" : "s") + " and " + summary.replanned_events + " instruction" +
      (summary.replanned_events === 1 ? "" : "s") + " re-planned onto the remaining nodes" }));
    if (summary.failed_events) {
      box.appendChild(el("div", { text: summary.failed_events + " instruction(s) did not complete (red outline)." }));
    }
  }

  // ------------------------------------------------------------------------------------------
  // Render everything, synchronously, then record what was drawn.
  // ------------------------------------------------------------------------------------------

  renderHeader();
  renderSummary();
  renderCode();
  const startView = /(?:^|[#&])view=single\b/.test(location.hash) ? "single" : "cluster";
  $("view-single").addEventListener("click", () => setView("single"));
  $("view-cluster").addEventListener("click", () => setView("cluster"));
  setView(startView);
  renderGrids();
  renderBytes();
  renderFailures();
  timeline = makeTimeline();
  if (model.grids.length && model.grids[0].cells.length) select(model.grids[0], model.grids[0].cells[0]);
  root.dataset.nodes = String(model.nodes.length);
  root.dataset.events = String(nEvents);
  root.dataset.rendered = "true";
})();
