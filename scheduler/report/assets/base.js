// Shared by the report's scripts (concatenated in scheduler/report.py into one strict function,
// so they share one scope): the model, colours, formatting, DOM and canvas helpers, the tooltip.

const model = JSON.parse(document.getElementById("trace-data").textContent);
const root = document.getElementById("report");
const $ = (id) => document.getElementById(id);

const KINDS = model.kinds;
const KIND_COLORS = {
  allocate: "#9ca3af", load: "#3b82f6", fetch: "#14b8a6", compute: "#f59e0b", store: "#8b5cf6", free: "#cbd5e1",
  serve: "#0f766e",
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
