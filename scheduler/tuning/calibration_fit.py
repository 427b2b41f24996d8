"""The pure half of --calibrate (scheduler/tuning/calibrate.py runs the probes): the tuner's figures
fitted to the probes' trace events. No I/O: tested without pods (tests/runtime/test_calibrate.py).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.tuning.tuner import Figures, LeafRate
from schemas.program import ClusterProgram


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y = a + b x, both kept >= 0 (a cost is never negative).

    With one distinct x (every sample the same size) there is no slope to separate from the
    intercept: all the time is put on the size (a = 0, b = mean y / x). A line that falls with
    size (b <= 0), which no transfer or leaf does, is scatter: refit through the origin, so that
    time grows with size at the samples' average rate, rather than a fixed cost with an infinite
    rate behind it (which gave figures like 1.4e18 FLOP/s and 3e12 B/s)."""
    if not xs:
        raise ValueError("no samples")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 1e-12 * max(1.0, mx * mx):
        return 0.0, (my / mx if mx else 0.0)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    if a < 0 or b <= 0:  # refit through the origin
        return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return a, b


def _rate(a: float, b: float, floor: float) -> tuple[float, float]:
    """(fixed cost, bandwidth or rate) from a line; a zero slope means 'too fast to see'."""
    return a, (1.0 / b if b > 0 else floor)


@dataclass(frozen=True)
class Probe:
    """One probe run: its trace and the plan it ran (instruction ids -> instructions per node)."""

    trace: dict
    program: ClusterProgram
    instructions: Mapping[int, Mapping[int, object]]  # node -> id -> instruction


def grouped_medians(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """One point per distinct size: the median time of the samples of that size.

    Pods share their machine (a CPU pod's computes with its transfers, several pods with each
    other, and other programs with all of them): single samples scatter by several times, and a
    few slow ones would tilt a plain least-squares line."""
    groups: dict[float, list[float]] = {}
    for x, y in zip(xs, ys, strict=True):
        groups.setdefault(x, []).append(y)
    keys = sorted(groups)
    return keys, [statistics.median(groups[k]) for k in keys]


def concurrency(probes: Sequence[Probe], kinds: tuple[str, ...]) -> float:
    """How many events of these kinds a node runs at once: the sum of their durations over the
    union of their intervals, averaged over the node-probes (1 when they never overlap)."""
    ratios = []
    for probe in probes:
        by_node: dict[int, list[tuple[float, float]]] = {}
        for e in probe.trace["events"]:
            if e["kind"] in kinds and e["ok"]:
                by_node.setdefault(e["node"], []).append((e["start"], e["end"]))
        for spans in by_node.values():
            total = sum(end - start for start, end in spans)
            union = _union_length(spans)
            if union > 0:
                ratios.append(total / union)
    return max(1.0, statistics.fmean(ratios)) if ratios else 1.0


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(spans):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _compute_samples(probes: Sequence[Probe]):
    """Per leaf: (FLOPs, seconds) of every launch but each node's first of the job, and the
    first launches' (FLOPs, seconds) apart: a pod prepares a leaf (parses it, or loads its PTX)
    on its first launch in a job, a cost per job rather than per launch."""
    steady: dict[str, tuple[list[float], list[float]]] = {}
    first: dict[str, list[tuple[float, float]]] = {}
    for probe in probes:
        flops = {leaf.name: leaf.flops for leaf in probe.program.leaves}
        seen: set[tuple[int, str]] = set()
        events = sorted((e for e in probe.trace["events"] if e["kind"] == "compute" and e["ok"]
                         and e.get("leaf") in flops), key=lambda e: e["start"])
        for e in events:
            sample = (float(flops[e["leaf"]]), max(0.0, e["end"] - e["start"]))
            if (e["node"], e["leaf"]) not in seen:
                seen.add((e["node"], e["leaf"]))
                first.setdefault(e["leaf"], []).append(sample)
                continue
            xs, ys = steady.setdefault(e["leaf"], ([], []))
            xs.append(sample[0])
            ys.append(sample[1])
    return steady, first


def _preparation(steady, first) -> dict[str, float]:
    """Per leaf: how much longer a node's first launch takes than a steady launch of the same
    size (median over the nodes where both were seen; 0 where never both)."""
    out = {}
    for leaf, samples in first.items():
        xs, ys = steady.get(leaf, ([], []))
        by_size: dict[float, list[float]] = {}
        for x, y in zip(xs, ys, strict=True):
            by_size.setdefault(x, []).append(y)
        extra = [y - statistics.median(by_size[x]) for x, y in samples if x in by_size]
        out[leaf] = max(0.0, statistics.median(extra)) if extra else 0.0
    return out


def fit_leaf_rates(probes: Sequence[Probe]) -> dict[str, LeafRate]:
    """Per leaf, `launch time = launch_s + FLOPs / rate` through the median launch time of each
    size, then shared out by the compute concurrency (a pod runs two units' computes at once).
    First launches count too, less the leaf's preparation (so a probe whose nodes launch a leaf
    once still gives its size)."""
    steady, first = _compute_samples(probes)
    prepare = _preparation(steady, first)
    together = concurrency(probes, ("compute",))
    rates = {}
    for leaf in set(steady) | set(first):
        xs, ys = (list(v) for v in steady.get(leaf, ([], [])))
        for x, y in first.get(leaf, []):
            xs.append(x)
            ys.append(max(0.0, y - prepare.get(leaf, 0.0)))
        a, b = fit_line(*grouped_medians(xs, ys))
        launch_s, flops_per_s = _rate(a, b, 1e18)
        rates[leaf] = LeafRate(launch_s / together, flops_per_s * together)
    return rates


def leaf_preparation_s(probes: Sequence[Probe], rates: Mapping[str, LeafRate] | None = None) -> float:
    """Seconds a node's first launch of each leaf takes beyond a steady one, summed over leaves:
    on the critical path once per job."""
    return sum(_preparation(*_compute_samples(probes)).values())


def overlap_fraction(probes: Sequence[Probe]) -> float:
    """How much of a node's transfer time hides under its compute: (C + T - B) / min(C, T) with
    C, T and B the union of its compute, transfer and all of these intervals; 1 = full overlap
    (a GPU computing while its copies run), 0 = none (a CPU pod whose cores do both)."""
    fractions = []
    for probe in probes:
        nodes: dict[int, dict[str, list[tuple[float, float]]]] = {}
        for e in probe.trace["events"]:
            if e["ok"] and e["kind"] in ("compute", "load", "fetch", "store"):
                side = "c" if e["kind"] == "compute" else "t"
                nodes.setdefault(e["node"], {"c": [], "t": []})[side].append((e["start"], e["end"]))
        for spans in nodes.values():
            c, t = _union_length(spans["c"]), _union_length(spans["t"])
            if min(c, t) > 0:
                both = _union_length(spans["c"] + spans["t"])
                fractions.append(min(1.0, max(0.0, (c + t - both) / min(c, t))))
    return statistics.fmean(fractions) if fractions else 1.0


def _fetch_samples(probe: Probe) -> tuple[list[float], list[float]]:
    """(bytes, seconds) of every fetch, timed from when its peer's tile was ready: the end of the
    load that filled it, or for a split's partial, of the last launch that wrote it."""
    from schemas.instructions import Compute, Fetch, Load

    ready: dict[tuple[int, int], float] = {}  # (node, buffer) -> end of the load that filled it
    written: dict[tuple[int, int], list[float]] = {}  # (node, buffer) -> ends of launches binding it
    ends = {(e["node"], e["id"]): e["end"] for e in probe.trace["events"]
            if e["kind"] in ("load", "fetch", "compute") and e["ok"]}
    for node, table in probe.instructions.items():
        for ins_id, ins in table.items():
            if isinstance(ins, Load) and (node, ins_id) in ends:
                ready[node, ins.buffer] = ends[node, ins_id]
            elif isinstance(ins, Compute) and (node, ins_id) in ends:
                for _, buffer in ins.bindings:
                    written.setdefault((node, buffer), []).append(ends[node, ins_id])
    xs, ys = [], []
    for e in probe.trace["events"]:
        if e["kind"] != "fetch" or not e["ok"]:
            continue
        ins = probe.instructions.get(e["node"], {}).get(e["id"])
        start = e["start"]
        if isinstance(ins, Fetch):
            key = (ins.peer, ins.peer_buffer)
            launches = [end for end in written.get(key, ()) if end <= e["end"]]
            start = max(start, ready.get(key, max(launches, default=start)))
        xs.append(float(e["bytes"]))
        ys.append(max(0.0, e["end"] - start))
    return xs, ys


@dataclass(frozen=True)
class TransferFit:
    storage_s: float  # fixed cost of one load or store
    storage_bw: float
    link_s: float
    link_bw: float
    job_s: float  # per job, outside every instruction (plan, submit, commit)


def fit_transfers(probes: Sequence[Probe], defaults: Figures) -> TransferFit:
    """Storage and link lines through the median time per size, shared out by how many
    transfers a pod runs at once (its I/O threads), and the per-job cost."""
    sxs, sys_ = [], []
    fxs, fys = [], []
    job = []
    for probe in probes:
        events = probe.trace["events"]
        for e in events:
            if e["kind"] in ("load", "store") and e["ok"]:
                sxs.append(float(e["bytes"]))
                sys_.append(max(0.0, e["end"] - e["start"]))
        xs, ys = _fetch_samples(probe)
        fxs += xs
        fys += ys
        if events:
            span = max(e["end"] for e in events) - min(e["start"] for e in events)
            job.append(max(0.0, probe.trace["summary"]["wall_s"] - span))
    together = concurrency(probes, ("load", "store", "fetch"))
    storage_s, storage_bw = defaults.transfer_s, defaults.storage_bw
    if sxs:
        a, b = fit_line(*grouped_medians(sxs, sys_))
        storage_s, storage_bw = a / together, (1.0 / b if b > 0 else 1e12) * together
    link_s, link_bw = storage_s, defaults.link_bw
    if fxs:
        a, b = fit_line(*grouped_medians(fxs, fys))
        link_s, link_bw = a / together, (1.0 / b if b > 0 else 1e12) * together
    return TransferFit(storage_s, storage_bw, link_s, link_bw, statistics.median(job) if job else 0.0)


@dataclass(frozen=True)
class Calibration:
    transfers: TransferFit
    rates: dict[str, LeafRate]
    prepare_s: float  # per job: the first launch of each leaf on a node, beyond a steady launch
    overlap: float = 1.0  # see overlap_fraction
    launch_times: dict[str, float] = dataclasses.field(default_factory=dict)  # see measure_launch_times
    instruction_s: float = 0.0  # see instruction_cost


def measure_launch_times(probes: Sequence[Probe]) -> dict[str, float]:
    """Seconds per launch of every leaf the probes ran, by `leaf_signature` (its dims and tile
    values): the median steady launch (else first launches less the leaf's preparation), shared
    out by that probe's compute concurrency. `measure` does not use them (see there); they are
    for comparing shapes by hand, and `Figures.launch_times` still takes them when given."""
    from scheduler.tuning.tuner import leaf_signature

    prepare = _preparation(*_compute_samples(probes))
    found: dict[str, list[float]] = {}
    for probe in probes:
        steady, first = _compute_samples([probe])
        together = concurrency([probe], ("compute",))
        for leaf in probe.program.leaves:
            times = steady.get(leaf.name, ([], []))[1] or \
                [max(0.0, y - prepare.get(leaf.name, 0.0)) for _, y in first.get(leaf.name, [])]
            if times:
                found.setdefault(leaf_signature(leaf), []).append(statistics.median(times) / together)
    return {sig: statistics.median(times) for sig, times in found.items()}


def node_spans(probe: Probe) -> dict[int, float]:
    """Per node, seconds from its first event's start to its last event's end."""
    spans: dict[int, list[float]] = {}
    for e in probe.trace["events"]:
        if e["ok"]:
            s = spans.setdefault(e["node"], [e["start"], e["end"]])
            s[0], s[1] = min(s[0], e["start"]), max(s[1], e["end"])
    return {node: end - start for node, (start, end) in spans.items()}


def instruction_cost(probes: Sequence[Probe], figures: Figures, prepare_s: float) -> float:
    """Seconds per instruction that the timed events leave unexplained: per node and probe, its
    span (less the leaves' preparation, which the model counts per job) minus the model's node
    time from the other figures, over the node's instruction count; the median of those, and
    never below 0 (a cost is not negative; where the events explain a span fully, it is 0).

    On a CPU pod every instruction costs the pod's one interpreter lock and the cores it shares
    with the other pods some time beyond its own event (dispatch, the event's report, waiting for
    the lock); what it is in a job with many more instructions than a probe is this same median."""
    from scheduler.tuning.tuner import account, estimate_node, leaf_signature
    from schemas.instructions import NodePlan

    per_instruction = []
    for probe in probes:
        plans = {node: NodePlan(node, 0, tuple(table.values()), 0)
                 for node, table in probe.instructions.items()}
        if not plans:
            continue
        signatures = {leaf.name: leaf_signature(leaf) for leaf in probe.program.leaves}
        spans = node_spans(probe)
        for load in account(plans, probe.program):
            if load.node in spans and load.instructions:
                modelled = estimate_node(load, figures, signatures).total_s
                per_instruction.append((spans[load.node] - prepare_s - modelled) / load.instructions)
    return max(0.0, statistics.median(per_instruction)) if per_instruction else 0.0


def measure(probes: Sequence[Probe], base: Figures) -> Calibration:
    """The figures from the probes. Each leaf's speed is its one line through every probe's
    launches, not the launch time measured per leaf shape (`measure_launch_times`): a shape is
    timed by one small probe at one moment, and on a shared machine that scatters by more than
    the shapes differ (in three calibrations of the 2048^3 matmul on 2 CPU pods, shapes of the
    same FLOPs came out up to 2x apart, and the per-shape times made the tuner choose a
    combination 21-30% slower than the best; with the line it chose the best in all three)."""
    rates = fit_leaf_rates(probes)
    partial = Calibration(fit_transfers(probes, base), rates, leaf_preparation_s(probes),
                          overlap_fraction(probes))
    fixed = instruction_cost(probes, figures_from(partial, base), partial.prepare_s)
    return dataclasses.replace(partial, instruction_s=fixed)


def figures_from(calibration: Calibration, base: Figures, source: str = "calibrated on the pods") -> Figures:
    """The model's figures from measurement: per-leaf rates, bandwidths and fixed costs."""
    t, rates = calibration.transfers, calibration.rates
    slowest = max(rates.values(), key=lambda r: 1.0 / r.flops_per_s, default=None)
    return dataclasses.replace(
        base, storage_bw=t.storage_bw, link_bw=t.link_bw, transfer_s=t.storage_s, link_s=t.link_s,
        job_s=t.job_s + calibration.prepare_s, overlap=calibration.overlap,
        leaf_rates=tuple(sorted(rates.items())), launch_times=tuple(sorted(calibration.launch_times.items())),
        leaf_flops=slowest.flops_per_s if slowest else base.leaf_flops,
        launch_s=slowest.launch_s if slowest else base.launch_s, instruction_s=calibration.instruction_s,
        source=source)
