"""The tuner chooses the split: share count and tree shape, from a model that counts the merges
(launches of the merge leaf) and the partials' transfers (fetched after the shares' compute)."""

from __future__ import annotations

from common.paths import repo_file
from compiler.cluster.tree import SplitRequest
from compiler.frontend.load import load_file
from scheduler.tuning.tuner import Figures, tune
from scheduler.tuning.tuner_table import render_table

SPLIT_K = load_file(repo_file("examples/jobs/matmul_split_k.phk")).kernels[0]
DECODE = load_file(repo_file("examples/decode_gqa.phk")).kernels[0]
# CPU-pod-like figures: 5 GFLOP/s leaves, 1 GB/s links, 1 ms per launch and per transfer.
CPU = dict(vram_bytes=0, leaf_flops=5e9, link_bw=1e9, storage_bw=2e9, launch_s=1e-3, transfer_s=1e-3)


def _best(kernel, dims, nodes, **figures):
    ranking = tune(kernel, dims, Figures(nodes=nodes, **{**CPU, **figures}))
    return ranking, ranking.best


def test_one_output_tile_and_a_long_k_splits_over_every_node():
    ranking, best = _best(SPLIT_K, {"M": 256, "N": 256, "K": 65536}, 4)
    assert best.split is not None and best.split.shares == 4
    # Unsplit, one unit keeps three nodes idle: dropped, as any candidate that leaves one idle.
    dropped = [c for c in ranking.dropped if c.split is None]
    assert dropped and all("node(s) would get none" in c.dropped for c in dropped)
    assert "split=4/" in render_table(ranking).splitlines()[-1]


def test_the_model_counts_merges_and_partial_transfers():
    ranking, _ = _best(SPLIT_K, {"M": 256, "N": 256, "K": 65536}, 4)
    by = {(c.split.shape, dict(c.values)["TILE_K"]): c
          for c in ranking.ranked if c.split and c.split.shares == 4}
    flat, binary = by["flat", 4096], by["binary", 4096]
    root = {c: max(c.loads, key=lambda n: n.tree_fetches) for c in (flat, binary)}
    merges = {c: dict((leaf, n) for leaf, n, _ in root[c].launches).get("merge", 0) for c in (flat, binary)}
    # Flat: the root merges and fetches all three other partials; binary: two rounds of one.
    assert (merges[flat], root[flat].tree_fetches) == (3, 3)
    assert (merges[binary], root[binary].tree_fetches) == (2, 2)
    assert root[flat].tree_fetched == 3 * 256 * 256 * 4
    # On a slow link the fewer transfers on the root's path win.
    slow, _ = _best(SPLIT_K, {"M": 256, "N": 256, "K": 65536}, 4, link_bw=1e7)
    costs = {(c.split.shape if c.split else "none", c.split.shares if c.split else 1): c.prediction.total_s
             for c in slow.ranked if dict(c.values)["TILE_K"] == 4096}
    assert costs["binary", 4] < costs["flat", 4]


def test_many_output_tiles_need_no_split():
    # 16 output super-tiles for 4 nodes: every node is busy without a split, which only adds merges.
    _, best = _best(SPLIT_K, {"M": 1024, "N": 1024, "K": 8192}, 4)
    assert best.split is None


def test_decode_splits_its_keys():
    _, best = _best(DECODE, {"G": 8, "D": 128, "S": 1 << 20}, 4)
    assert best.split is not None and best.split.shares == 4


def test_a_pinned_split_is_the_only_one():
    ranking = tune(SPLIT_K, {"M": 256, "N": 256, "K": 65536}, Figures(nodes=4, **CPU),
                   split=SplitRequest(2, "flat"))
    assert {c.split for c in (*ranking.ranked, *ranking.dropped)} == {SplitRequest(2, "flat")}


def test_nodes_on_several_hosts_add_a_tree_by_hosts():
    # Four nodes, two per host, interleaved; the link between hosts 100x slower than inside one.
    hosts = ("a", "b", "a", "b")
    ranking = tune(SPLIT_K, {"M": 256, "N": 256, "K": 65536},
                   Figures(nodes=4, hosts=hosts, **{**CPU, "link_bw": 1e9}, host_bw=1e7))
    by = {(c.split.shape, dict(c.values)["TILE_K"]): c
          for c in ranking.ranked if c.split and c.split.shares == 4}
    by_hosts, flat = by["hosts", 4096], by["flat", 4096]
    assert by_hosts.split.hosts == (2, 2)
    # The root takes its host's other share inside the host and one partial across: flat takes two
    # of its three across the slow link.
    assert sum(n.host_moved for n in by_hosts.loads) < sum(n.host_moved for n in flat.loads)
    assert by_hosts.prediction.total_s < flat.prediction.total_s
    assert "2 hosts, between hosts 1e+07 B/s" in render_table(ranking).splitlines()[0]
    # On one host no tree by hosts is tried.
    one = tune(SPLIT_K, {"M": 256, "N": 256, "K": 65536}, Figures(nodes=4, **CPU))
    assert all(c.split is None or c.split.shape != "hosts" for c in (*one.ranked, *one.dropped))


def test_splits_are_tried_only_where_units_do_not_share_out_evenly():
    # 4 x 4 output super-tiles on 4 nodes: 4 units each, no split tried; on 3 nodes 16 units do not
    # share out (6, 5, 5), so the splits are tried and ranked with the rest.
    dims = {"M": 1024, "N": 1024, "K": 16384}
    four = tune(SPLIT_K, dims, Figures(nodes=4, **CPU))
    assert all(c.split is None for c in (*four.ranked, *four.dropped) if c.units == 16)
    three = tune(SPLIT_K, dims, Figures(nodes=3, **CPU))
    assert {c.split.shares for c in three.ranked if c.split} == {2, 3}
