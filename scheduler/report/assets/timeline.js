// The timeline: one canvas, one row per node and one lane per instruction kind. Instructions of
// one kind that overlap in time (a pod runs several loads or fetches at once) are stacked in up
// to MAX_SLOTS slots of their lane, so each stays visible. Bars narrower than a pixel are summed
// into per-pixel columns, so 10,000+ instructions draw quickly.

const ev = model.events;
const nEvents = ev.node.length;
const LANES = ["load", "fetch", "compute", "store"];
const LABEL_W = 170, AXIS_H = 26, LANE_H = 11, LANE_GAP = 2, MEM_H = 5, ROW_PAD = 7;
const MAX_SLOTS = 4, SLOT_H = 6;
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
    // Greedy interval partitioning: each bar takes the first slot free at its start; past
    // MAX_SLOTS, the slot that frees first (bars may then overlap, as they would unstacked).
    const slot = new Uint8Array(list.length), ends = [];
    list.forEach((i, k) => {
      maxDur = Math.max(maxDur, ev.end[i] - ev.start[i]);
      let s = ends.findIndex((e) => e <= ev.start[i]);
      if (s < 0 && ends.length < MAX_SLOTS) { s = ends.length; ends.push(0); }
      if (s < 0) s = ends.indexOf(Math.min(...ends));
      ends[s] = Math.max(ends[s], ev.end[i]);
      slot[k] = s;
    });
    return { idx: Int32Array.from(list), maxDur, slot, slots: Math.max(1, ends.length) };
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
  if (kind === "serve") {
    return "node " + ev.node[i] + " served buffer " + ev.id[i] + " (" + fmtBytes(ev.bytes[i]) + ") to node " +
      ev.peer[i] + "\nat " + fmtTime(ev.start[i]) + " · generation " + ev.generation[i];
  }
  const lines = [kind + " #" + ev.id[i] + " on node " + ev.node[i] + (ev.ok[i] ? "" : "  (FAILED)"),
    "start " + fmtTime(ev.start[i]) + " · end " + fmtTime(ev.end[i]) + " · " + fmtTime(ev.end[i] - ev.start[i])];
  if (ev.bytes[i]) lines.push(fmtBytes(ev.bytes[i]) + (kind === "load" || kind === "fetch"
    ? " from " + (ev.peer[i] >= 0 ? "node " + ev.peer[i] : "storage") : kind === "store" ? " to storage" : ""));
  else if (ev.peer[i] >= 0) lines.push("peer node " + ev.peer[i]);
  if (ev.unit[i] >= 0) lines.push("unit " + ev.unit[i] + (ev.leaf[i] >= 0 ? " · leaf " + ev.events_leaf_name(i) : ""));
  else if (ev.leaf[i] >= 0) lines.push("leaf " + ev.events_leaf_name(i));
  lines.push("generation " + ev.generation[i] + (ev.replanned[i] ? " · re-planned after a failure" : ""));
  if (ev.messages[i]) lines.push(ev.messages[i]);
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

  // One layout per node row: a main lane is as tall as its stacked slots need.
  function rowLayout(r) {
    const list = LANES.map((k) => ({ kind: KINDS.indexOf(k), main: true }));
    // Tiles served to peers: instants reported by the serving pod, a thin lane under "fetch".
    if (model.summary.serves) list.splice(2, 0, { kind: KINDS.indexOf("serve"), main: false });
    if (showMemory) {
      list.push({ kind: KINDS.indexOf("allocate"), main: false }, { kind: KINDS.indexOf("free"), main: false });
    }
    let y = ROW_PAD;
    list.forEach((l) => {
      l.slots = l.main ? lanes[r][l.kind].slots : 1;
      l.h = l.main ? Math.max(LANE_H, l.slots * SLOT_H) : MEM_H;
      l.y = y;
      y += l.h + LANE_GAP;
    });
    return { list, rowH: Math.max(46, y + ROW_PAD - LANE_GAP) };
  }

  function laneLayout() {
    let top = AXIS_H;
    return model.nodes.map((n, r) => {
      const row = rowLayout(r);
      row.top = top;
      top += row.rowH;
      return row;
    });
  }

  let rows = laneLayout();
  let width = 0, height = 0, ctx = null, pending = false;
  const stripeCache = {};

  function size() {
    width = Math.max(400, wrap.clientWidth);
    height = (rows.length ? rows[rows.length - 1].top + rows[rows.length - 1].rowH : AXIS_H) + 4;
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
    const sh = h / laneInfo.slots, gap = laneInfo.slots > 1 ? 1 : 0;
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
        const y = y0 + lane.slot[k] * sh, bh = sh - gap;
        ctx.fillStyle = ev.replanned[i] ? stripePattern(color) : color;
        ctx.fillRect(x0, y, x1 - x0, bh);
        if (!ev.ok[i] || ev.replanned[i] || ev.unit[i] === selectedUnit && selectedUnit !== null) {
          ctx.strokeStyle = !ev.ok[i] ? FAIL : ev.unit[i] === selectedUnit ? "#111" : REPLAN;
          ctx.lineWidth = 1;
          ctx.strokeRect(x0 + 0.5, y + 0.5, Math.max(0, x1 - x0 - 1), Math.max(0, bh - 1));
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
      const layout = rows[r], top = layout.top;
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
        if (laneInfo.main) ctx.fillText(KINDS[laneInfo.kind], LABEL_W - 44, top + laneInfo.y + 1);
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
    const r = rows.findIndex((row) => my >= row.top && my < row.top + row.rowH);
    if (r < 0 || mx < LABEL_W) return -1;
    const yIn = my - rows[r].top;
    const laneInfo = rows[r].list.find((l) => yIn >= l.y - 1 && yIn <= l.y + l.h + 1);
    if (!laneInfo) return -1;
    const lane = lanes[r][laneInfo.kind];
    const want = laneInfo.main ? Math.min(laneInfo.slots - 1, Math.max(0,
      Math.floor((yIn - laneInfo.y) / (laneInfo.h / laneInfo.slots)))) : -1;
    const t = T(mx), tol = 3 * (view.t1 - view.t0) / (width - LABEL_W);
    // The nearest bar under the pointer, preferring the stacked slot the pointer is in.
    let best = -1, bestD = Infinity;
    for (let k = firstAtOrAfter(lane, t - tol - lane.maxDur); k < lane.idx.length; k++) {
      const i = lane.idx[k];
      if (ev.start[i] > t + tol) break;
      if (ev.end[i] < t - tol) continue;
      const d = Math.abs((ev.start[i] + ev.end[i]) / 2 - t) + (want >= 0 && lane.slot[k] !== want ? 1e9 : 0);
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
    showMemory = e.target.checked; rows = laneLayout(); size(); draw();
  });
  window.addEventListener("resize", () => { size(); draw(); });

  const legend = $("kind-legend");
  KINDS.filter((k) => k !== "serve" || model.summary.serves).forEach((k) => legend.appendChild(el("span", null, [
    el("span", { className: "swatch", style: "background:" + KIND_COLORS[k] }), k + " "])));
  legend.appendChild(el("span", null, [el("span", { className: "swatch",
    style: "background: repeating-linear-gradient(45deg," + REPLAN + " 0 2px,#fff 2px 4px)" }), "re-planned "]));
  legend.appendChild(el("span", null, [el("span", { className: "swatch", style: "background:" + FAIL }),
    "node failure"]));

  size();
  draw();
  function setRange(t0, t1) {
    if (t1 > t0) { view.t0 = t0; view.t1 = t1; draw(); }
  }
  // Where a lane of a node row is, in page coordinates (for the self-test below).
  function laneCenter(row, kindName, slot = 0) {
    const laneInfo = rows[row].list.find((l) => KINDS[l.kind] === kindName);
    const r = canvas.getBoundingClientRect();
    return r.top + rows[row].top + laneInfo.y + (slot + 0.5) * laneInfo.h / laneInfo.slots;
  }
  return { draw: schedule, setRange, hit, view, X, laneCenter, canvas, lanes };
}
