// The code panel: syntax colouring, and the @cluster line, hidden until the toggle shows it.

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
    const one = model.single_gpu || {};
    box.appendChild(el("div", { id: "single-gpu-grid", text: one.grid
      ? "grid on one GPU: " + one.grid.join(" × ") + " = " + one.ctas + " CTAs"
      : "grid on one GPU: not known (" + (one.why_not || "no source") + ")" }));
    root.dataset.singleGpuCtas = String(one.ctas || 0);
    box.appendChild(el("div", { text: "On one GPU the kernel compiles with its @autotune values as if " +
      "the @cluster line were not there." }));
  }
}

function recordClusterLine() {
  root.dataset.clusterLineHidden = String(clusterLineElements.length > 0 &&
    clusterLineElements.every((e) => getComputedStyle(e).display === "none"));
}

function setClusterLine(shown) {
  document.body.dataset.clusterLine = shown ? "shown" : "hidden";
  const button = $("toggle-cluster-line");
  button.setAttribute("aria-pressed", String(shown));
  button.textContent = shown ? "hide @cluster" : "show @cluster";
  button.hidden = clusterLineElements.length === 0;
  recordClusterLine();
}

function setView(view) {
  document.body.dataset.view = view;
  $("view-single").classList.toggle("active", view === "single");
  $("view-cluster").classList.toggle("active", view === "cluster");
  $("view-label").textContent = view === "single" ? "· single-GPU view" : "· cluster view";
  root.dataset.view = view;
  recordClusterLine();
  renderValues(view);
}
