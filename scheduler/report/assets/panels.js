// Header, summary figures, bytes matrix and failure list: small DOM tables.

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
    "compute (sum)", "compute busy", "status"];
  const table = el("table", { id: "summary-table" }, [el("tr", null, head.map((h) => el("th", { text: h })))]);
  const byNode = {};
  model.nodes.forEach((n) => { byNode[n.node] = n; });
  summary.nodes.forEach((r) => {
    const n = byNode[r.node] || {};
    const status = n.failed_at !== null && n.failed_at !== undefined
      ? "failed at " + fmtTime(n.failed_at) : "ok";
    // Share of the wall time in which at least one compute ran on the node.
    const busy = summary.wall_s > 0 ? (100 * r.compute_busy_s / summary.wall_s).toFixed(1) + " %" : "";
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
  if (model.phases && model.phases.length) {
    // Where the command's time went (scheduler/tracing/phases.py): start-up, compile, read, copies, compute, write, commit.
    const phases = el("div", { className: "figures", id: "phases" }, model.phases.map(([k, v]) =>
      el("div", { className: "figure" }, [el("div", { className: "v", text: fmtTime(v) }), el("div", { className: "k", text: k })])));
    $("summary").append(el("h3", { text: "where the time went" }), phases);
  }
}


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
  if (summary.skipped_events) {
    box.appendChild(el("div", { text: summary.skipped_events + " event(s) of kinds this report does not know " +
      "were left out." }));
  }
  if (!model.failures.length) {
    box.appendChild(el("div", { text: "No node failed during this run." }));
    if (summary.failed_events) {
      box.appendChild(el("div", { text: summary.failed_events + " instruction(s) did not complete (red outline)." }));
    }
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
