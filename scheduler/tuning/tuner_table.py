"""The cluster tuner's ranking as text: the figures it predicted with, then one row per
candidate (combination, predicted time, busiest node, bytes moved, peak memory) and the dropped
ones with their reasons (`phobos-sched --autotune`, benchmarks/model_validation.py). The model
that ranks them is tuner.py's."""

from __future__ import annotations

from scheduler.tuning.tuner import Figures, Ranking, format_bytes, format_seconds


def describe_figures(figures: Figures) -> str:
    vram = format_bytes(figures.vram_bytes) if figures.vram_bytes else "unchecked"
    text = (f"{figures.nodes} nodes, memory {vram}, leaf {figures.leaf_flops:.3g} FLOP/s, "
            f"link {figures.link_bw:.3g} B/s, storage {figures.storage_bw:.3g} B/s")
    if len(set(figures.hosts)) > 1:
        between = figures.host_bw or figures.link_bw
        text += f", {len(set(figures.hosts))} hosts, between hosts {between:.3g} B/s"
    if figures.overlap != 1.0:
        text += f", overlap {figures.overlap:.2f}"
    if figures.launch_s or figures.transfer_s or figures.job_s:
        text += (f", per launch {format_seconds(figures.launch_s)}, per load/store "
                 f"{format_seconds(figures.transfer_s)}")
        if figures.link_s is not None:
            text += f", per fetch {format_seconds(figures.link_s)}"
        text += f", per job {format_seconds(figures.job_s)}"
    if figures.instruction_s:
        text += f", per instruction {format_seconds(figures.instruction_s)}"
    for name, r in figures.leaf_rates:
        text += f"; leaf {name}: {r.flops_per_s:.3g} FLOP/s + {format_seconds(r.launch_s)}/launch"
    return f"{text} ({figures.source})"


def render_table(ranking: Ranking) -> str:
    """The ranked table: combination, predicted time, busiest node, bytes moved; then the drops."""
    lines = [f"cluster tuner: {describe_figures(ranking.figures)}"]
    if ranking.pinned:
        lines.append("pinned by --cluster: " + " ".join(f"{k}={v}" for k, v in ranking.pinned))
    label_w = max([len(c.label()) for c in (*ranking.ranked, *ranking.dropped)] + [11])
    lines.append(f"{'rank':>4}  {'combination':<{label_w}} {'units':>6} {'predicted':>11} {'busiest':>8} "
                 f"{'compute':>10} {'transfer':>10} {'moved':>10} {'peak mem':>10}")
    for i, c in enumerate(ranking.ranked, 1):
        p = c.prediction
        lines.append(f"{i:>4}  {c.label():<{label_w}} {c.units:>6} {format_seconds(p.total_s):>11} "
                     f"{'node ' + str(p.busiest.node):>8} {format_seconds(p.busiest.compute_s):>10} "
                     f"{format_seconds(p.busiest.transfer_s):>10} {format_bytes(c.bytes_moved):>10} "
                     f"{format_bytes(c.peak_bytes):>10}")
    for c in ranking.dropped:
        lines.append(f"{'-':>4}  {c.label():<{label_w}} dropped: {c.dropped}")
    if ranking.ranked:
        lines.append(f"chosen: {ranking.ranked[0].label()}")
    return "\n".join(lines)
