"""The split model: compute shrinks with shares, the tree's transfers and merges grow with them,
and the choice follows the figures."""

from __future__ import annotations

import pytest

from compiler.cluster.tree import SplitRequest
from scheduler.split_model import SplitFigures, choose_split, figures_of, predict

# A split-K matmul's unit on CPU pods: 16 chunks of 1.1 GFLOP at 5 GFLOP/s, partials of 256 KiB.
CPU = SplitFigures(chunk_s=0.22, merge_s=2e-3, partial_bytes=256 * 1024, link_bw=1e9, transfer_s=1e-3)


def test_one_share_has_no_tree():
    p = predict(SplitRequest(1), 16, CPU)
    assert (p.tree_s, p.transfers) == (0.0, 0) and p.total_s == pytest.approx(16 * 0.22)


def test_counts_transfers_and_rounds():
    flat = predict(SplitRequest(4), 16, CPU)
    binary = predict(SplitRequest(4, "binary"), 16, CPU)
    round_s = 1e-3 + 256 * 1024 / 1e9 + 2e-3
    assert flat.transfers == binary.transfers == 3
    assert flat.tree_s == pytest.approx(3 * round_s) and binary.tree_s == pytest.approx(2 * round_s)
    assert flat.compute_s == binary.compute_s == pytest.approx(4 * 0.22)


def test_ragged_shares_cost_their_largest():
    assert predict(SplitRequest(3), 7, CPU).compute_s == pytest.approx(3 * 0.22)


def test_hosts_tree_moves_one_partial_per_host_across_hosts():
    slow_hosts = SplitFigures(**{**CPU.__dict__, "host_bw": 1e7})
    node_hosts = (0, 0, 0, 0, 1, 1, 1, 1)
    by_hosts = predict(SplitRequest(8, "hosts", (4, 4)), 16, slow_hosts, node_hosts)
    flat = predict(SplitRequest(8), 16, slow_hosts, node_hosts)
    assert (by_hosts.transfers, by_hosts.host_transfers) == (7, 1)
    assert flat.host_transfers == 4 and by_hosts.total_s < flat.total_s


def test_choice_follows_the_figures():
    best = choose_split(16, 4, CPU)[0]
    assert best.request.shares == 4 and best.request.shape == "binary"
    # Transfers far costlier than the work saved: no split.
    slow = SplitFigures(**{**CPU.__dict__, "transfer_s": 10.0})
    assert choose_split(16, 4, slow)[0].request == SplitRequest(1)
    # Never more shares than chunks.
    assert max(p.request.shares for p in choose_split(3, 8, CPU)) == 3


def test_hosts_trees_are_offered_only_for_contiguous_hosts():
    shapes = {(p.request.shape, p.request.hosts) for p in choose_split(16, 4, CPU, (0, 0, 1, 1))}
    assert ("hosts", (2, 2)) in shapes and ("hosts", (2, 1)) in shapes
    interleaved = choose_split(16, 4, CPU, (0, 1, 0, 1))
    assert not any(p.request.shape == "hosts" and p.request.shares > 2 for p in interleaved)


def test_figures_of_a_split_program():
    from compiler.cluster.build import compile_cluster
    from tests.cluster.helpers import small

    program = compile_cluster(small("decode_gqa_small"), {"G": 8, "S": 1024}, cluster_values={"BS": 128},
                              split=SplitRequest(2))
    figures = figures_of(program, leaf_flops=1e9, launch_s=1e-3, link_bw=1e9, transfer_s=1e-4)
    step = next(leaf for leaf in program.leaves if leaf.name == "step")
    assert figures.chunk_s == pytest.approx(1e-3 + step.flops / 1e9)
    assert figures.partial_bytes == 4 * (8 + 8 + 8 * 16)  # m, l and acc of 8 query rows, D = 16
    assert figures.finish_s > 1e-3 and figures.merge_s > 1e-3
