"""The cluster tuner's model, pure: accounting, prediction, pruning rules and ranking."""

from __future__ import annotations

import pytest

from common.errors import UserError
from compiler.frontend.load import load_text
from scheduler.tuning.tuner import Figures, LeafRate, evaluate, predict, rank, tune
from scheduler.tuning.tuner_table import render_table

ADD = """@cluster(BLOCK in [{values}])
@autotune(BLOCK in [16, 64])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {{
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}}
"""

MATMUL = """@cluster(TILE_M in [32, 64], TILE_N in [32, 64], TILE_K in [32, 64])
@autotune(TILE_M in [16, 32], TILE_N in [16, 32], TILE_K in [8, 16])
@aligned(M = TILE_M, N = TILE_N, K = TILE_K)
kernel matmul(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N], alpha: f32, beta: f32) {
  let pm = ctx.block.x
  let pn = ctx.block.y
  var acc: tile<f32>[TILE_M, TILE_N] = 0.0
  for kt in range(0, K, TILE_K) {
    let a = A[pm * TILE_M :+ TILE_M, kt :+ TILE_K]
    let b = B[kt :+ TILE_K, pn * TILE_N :+ TILE_N]
    acc += dot(a, b)
  }
  let c_old = C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N]
  C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N] = alpha * acc + beta * c_old
}
"""


def add_kernel(values: str = "256, 512"):
    return load_text(ADD.format(values=values), "add.phk").kernels[0]


def matmul_kernel():
    return load_text(MATMUL, "matmul.phk").kernels[0]


# Round numbers so that every figure below is checked by hand: one f32 block of 256 is 1 KiB,
# storage moves 1 KiB per second, a leaf does 1 KiFLOP per second.
HAND = dict(nodes=2, vram_bytes=0, leaf_flops=1024, link_bw=1e12, storage_bw=1024)


def by_label(candidates):
    return {c.label(): c for c in candidates}


def test_accounting_of_add_by_hand():
    got = by_label(evaluate(add_kernel(), {"N": 1024}, Figures(**HAND)))
    small, large = got["BLOCK=256"], got["BLOCK=512"]
    # BLOCK=256: 4 units dealt round robin, 2 per node; each loads a and b (1 KiB each), stores c.
    for load in small.loads:
        assert load.units == 2
        assert load.launches == (("main", 2, 2 * 256),)  # one add per element
        moved = (load.bytes_loaded, load.bytes_stored, load.bytes_fetched, load.bytes_served)
        assert moved == (4096, 2048, 0, 0)
        assert (load.transfers, load.fetches) == (6, 0)
        assert (load.start_loaded, load.start_fetched, load.end_stored) == (2048, 0, 1024)
    for load in large.loads:
        assert load.units == 1
        moved = (load.bytes_loaded, load.bytes_stored, load.start_loaded, load.end_stored)
        assert moved == (4096, 2048, 4096, 2048)


def test_prediction_by_hand_and_ranking_flips_with_launch_cost():
    kernel = add_kernel()
    # launch 1 s. BLOCK=256: compute 2 * (1 + 0.25) = 2.5 s; transfer 6 KiB = 6 s; start 2 s (a0, b0),
    # end 1 s (c): 2 + max(2.5, 6 - 2 - 1) + 1 = 6 s. BLOCK=512: compute 1 + 0.5 = 1.5 s, transfer 6 s,
    # start 4 s, end 2 s: 4 + max(1.5, 0) + 2 = 7.5 s. Small blocks overlap better: 256 first.
    ranking = tune(kernel, {"N": 1024}, Figures(**HAND, launch_s=1.0))
    assert [c.label() for c in ranking.ranked] == ["BLOCK=256", "BLOCK=512"]
    assert [c.prediction.total_s for c in ranking.ranked] == [pytest.approx(6.0), pytest.approx(7.5)]
    busiest = ranking.ranked[0].prediction.busiest
    parts = (busiest.compute_s, busiest.transfer_s, busiest.start_s, busiest.end_s)
    assert parts == pytest.approx((2.5, 6, 2, 1))
    # launch 4 s: BLOCK=256 computes 2 * 4.25 = 8.5 s -> 2 + 8.5 + 1 = 11.5 s; BLOCK=512 computes
    # 4.5 s -> 4 + 4.5 + 2 = 10.5 s: fewer launches win.
    ranking = tune(kernel, {"N": 1024}, Figures(**HAND, launch_s=4.0))
    assert [c.label() for c in ranking.ranked] == ["BLOCK=512", "BLOCK=256"]
    assert [c.prediction.total_s for c in ranking.ranked] == [pytest.approx(10.5), pytest.approx(11.5)]


def test_ties_keep_search_space_order_and_job_cost_adds():
    # launch 3 s: 2 + 6.5 + 1 = 9.5 s and 4 + 3.5 + 2 = 9.5 s: a tie, so the first value stays first.
    ranking = tune(add_kernel(), {"N": 1024}, Figures(**HAND, launch_s=3.0, job_s=0.5))
    assert [c.label() for c in ranking.ranked] == ["BLOCK=256", "BLOCK=512"]
    assert ranking.ranked[0].prediction.total_s == pytest.approx(10.0)


def test_each_instruction_adds_its_fixed_cost_to_its_node():
    # BLOCK=256 (see above, 6 s at launch 1 s): each node's plan has its allocates, loads, launches,
    # stores and frees; at 0.25 s each, the node's time grows by a quarter of their count.
    plain = tune(add_kernel(), {"N": 1024}, Figures(**HAND, launch_s=1.0))
    costly = tune(add_kernel(), {"N": 1024}, Figures(**HAND, launch_s=1.0, instruction_s=0.25))
    small = by_label(plain.ranked)["BLOCK=256"]
    busiest = small.prediction.busiest.node
    instructions = next(load.instructions for load in small.loads if load.node == busiest)
    assert instructions >= 2 * (2 + 1 + 1)  # per unit at least: two loads, a launch, a store
    assert by_label(costly.ranked)["BLOCK=256"].prediction.total_s == pytest.approx(6.0 + 0.25 * instructions)
    assert "per instruction 250.00 ms" in render_table(costly)


def test_node_without_a_super_tile_is_dropped():
    # N = 1024: BLOCK=512 gives 2 super-tiles; on 4 nodes two would idle.
    ranking = tune(add_kernel(), {"N": 1024}, Figures(**{**HAND, "nodes": 4}))
    assert [c.label() for c in ranking.ranked] == ["BLOCK=256"]
    (dropped,) = ranking.dropped
    assert dropped.label() == "BLOCK=512"
    assert "2 super-tile(s) for 4 nodes" in dropped.dropped and "2 node(s) would get none" in dropped.dropped


def test_a_problem_smaller_than_nodes_times_super_tiles_is_still_ranked():
    # N = 200: every combination is one super-tile; none can keep two nodes busy, so all rank.
    ranking = tune(add_kernel(), {"N": 200}, Figures(**{**HAND, "nodes": 2}))
    assert {c.label() for c in ranking.ranked} == {"BLOCK=256", "BLOCK=512"} and not ranking.dropped
    assert [c.units for c in ranking.ranked] == [1, 1]
    # N = 300: BLOCK=256 keeps both nodes busy (a super-tile of 256 and one of 44), so 512 drops.
    ranking = tune(add_kernel(), {"N": 300}, Figures(**{**HAND, "nodes": 2}))
    assert [c.label() for c in ranking.ranked] == ["BLOCK=256"]
    assert "1 node(s) would get none" in ranking.dropped[0].dropped


def test_vram_drops_combinations_whose_peak_does_not_fit():
    dims = {"M": 128, "N": 128, "K": 128}
    free = by_label(evaluate(matmul_kernel(), dims, Figures(**HAND)))
    peaks = sorted({c.peak_bytes for c in free.values()})
    assert len(peaks) > 1
    limit = peaks[0]  # only the combinations with the smallest peak fit
    ranking = tune(matmul_kernel(), dims, Figures(**{**HAND, "vram_bytes": limit}))
    assert ranking.ranked and all(c.peak_bytes <= limit for c in ranking.ranked)
    assert {c.label() for c in ranking.dropped} == {k for k, c in free.items() if c.peak_bytes > limit}
    for c in ranking.dropped:
        assert "at its peak, more than its" in c.dropped


def test_nothing_fits_is_a_user_error_naming_every_reason():
    ranking = tune(add_kernel(), {"N": 1024}, Figures(**{**HAND, "vram_bytes": 100}))
    assert not ranking.ranked
    with pytest.raises(UserError, match="no @cluster combination can run on 2 node") as err:
        _ = ranking.best
    lines = str(err.value).splitlines()  # one line per combination, each with its reason
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["BLOCK=256", "BLOCK=512"]
    assert all("more than its 100 B of memory" in line for line in lines[1:])


def test_compiler_rejection_is_a_drop_with_its_reason():
    # A super-tile of 96 is not a whole multiple of the leaf's tile of 64.
    text = ADD.format(values="96, 256, 512").replace("[16, 64]", "[64, 128]")
    ranking = tune(load_text(text, "add.phk").kernels[0], {"N": 768}, Figures(**{**HAND, "nodes": 1}))
    assert [c.label() for c in ranking.ranked] == ["BLOCK=256", "BLOCK=512"]
    assert ranking.dropped[0].dropped == ("super-tile BLOCK = 96 is not a whole multiple of the leaf's tile "
                                          "BLOCK = 64 (@autotune)")


def test_a_size_that_is_no_multiple_runs_with_a_smaller_last_super_tile():
    ranking = tune(add_kernel(), {"N": 768}, Figures(**{**HAND, "nodes": 1}))
    assert [c.label() for c in ranking.ranked] == ["BLOCK=256", "BLOCK=512"] and not ranking.dropped


def test_matmul_fetches_are_served_by_peers_and_counted_on_both_ends():
    dims = {"M": 128, "N": 128, "K": 128}
    cands = by_label(evaluate(matmul_kernel(), dims, Figures(**{**HAND, "nodes": 4})))
    c = cands["TILE_M=32 TILE_N=32 TILE_K=32"]
    fetched = sum(n.bytes_fetched for n in c.loads)
    served = sum(n.bytes_served for n in c.loads)
    assert fetched == served > 0
    # Every input region is loaded once from storage: A and B once each, C once (beta) per unit.
    assert sum(n.bytes_loaded for n in c.loads) == 3 * 128 * 128 * 4
    assert sum(n.bytes_stored for n in c.loads) == 128 * 128 * 4
    # 16 units: one init and 4 steps each; a step is 2 * 32^3 FLOPs of dot plus the compiler's
    # count of the accumulations around it (a few per cent more).
    steps = sum(count for n in c.loads for leaf, count, _ in n.launches if leaf == "step")
    assert steps == 16 * 4
    step_flops = {total // count for n in c.loads for leaf, count, total in n.launches if leaf == "step"}
    (flops,) = step_flops
    assert 2 * 32 ** 3 <= flops < 1.2 * 2 * 32 ** 3


def test_per_leaf_rates_override_and_link_costs_count():
    dims = {"M": 128, "N": 128, "K": 128}
    base = Figures(nodes=4, vram_bytes=0, leaf_flops=1e9, link_bw=1e9, storage_bw=1e9)
    (c,) = [x for x in evaluate(matmul_kernel(), dims, base) if x.label() == "TILE_M=32 TILE_N=32 TILE_K=32"]
    slow_step = Figures(**{**base.__dict__, "leaf_rates": (("step", LeafRate(0.0, 1e6)),)})
    assert predict(c.loads, slow_step).total_s > 100 * predict(c.loads, base).total_s
    slow_link = Figures(**{**base.__dict__, "link_bw": 1e3})
    busiest = predict(c.loads, slow_link).busiest
    load = next(n for n in c.loads if n.node == busiest.node)
    assert busiest.transfer_s >= (load.bytes_fetched + load.bytes_served) / 1e3


def test_pinned_values_restrict_the_space():
    dims = {"M": 128, "N": 128, "K": 128}
    ranking = tune(matmul_kernel(), dims, Figures(**HAND), pinned={"TILE_K": 64})
    candidates = (*ranking.ranked, *ranking.dropped)
    # four combinations, unsplit: each has an even number of units for the two nodes, so no split
    # of its K loop is tried (tests/scheduler/test_tune_split.py tries them)
    assert len(candidates) == 4 and all(c.split is None for c in candidates)
    assert all(dict(c.values)["TILE_K"] == 64 for c in ranking.ranked)
    with pytest.raises(UserError, match="no @cluster name TILE_Q"):
        tune(matmul_kernel(), dims, Figures(**HAND), pinned={"TILE_Q": 64})
    # A pinned value outside the search space is planned as given.
    ranking = tune(matmul_kernel(), dims, Figures(**HAND), pinned={"TILE_K": 48})
    assert {dict(c.values)["TILE_K"] for c in (*ranking.ranked, *ranking.dropped)} == {48}


def test_table_lists_ranked_then_dropped_and_the_choice():
    ranking = tune(add_kernel(), {"N": 1024}, Figures(**{**HAND, "nodes": 4}, launch_s=1.0))
    text = render_table(ranking)
    lines = text.splitlines()
    assert lines[0].startswith("cluster tuner: 4 nodes")
    assert "predicted" in lines[1] and "busiest" in lines[1] and "moved" in lines[1]
    assert lines[2].split()[:2] == ["1", "BLOCK=256"]
    assert "dropped: 2 super-tile(s)" in lines[3]
    assert lines[-1] == "chosen: BLOCK=256"


def test_rank_sorts_by_prediction():
    cands = evaluate(add_kernel("256, 512, 1024"), {"N": 4096}, Figures(**HAND, launch_s=100.0))
    ranking = rank(cands, Figures(**HAND, launch_s=100.0))
    times = [c.prediction.total_s for c in ranking.ranked]
    assert times == sorted(times)
    assert ranking.best.label() == "BLOCK=1024"  # launches dominate: fewest launches win
