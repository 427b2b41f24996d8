"""Cross-node reductions: a cluster loop split over shares merged by a tree. The sequential
reference (every launch in order through the interpreter) equals the plain kernel for split-K
matmul and split-KV decode at several share counts, tree shapes and ragged chunk counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import UserError
from compiler.cluster.build import compile_cluster
from compiler.cluster.sequential import run_program
from compiler.cluster.tree import SplitRequest, share_chunks, tree_rounds
from compiler.frontend.binding import bind
from compiler.interp.interpreter import run_kernel
from tests.cluster.helpers import small
from tests.cluster.test_reject import FLASH_BC, MATMUL

RNG = np.random.default_rng(23)

TREES = [
    SplitRequest(1),
    SplitRequest(2),
    SplitRequest(3),  # 7 chunks over 3 shares: 3, 2, 2
    SplitRequest(5, "binary"),
    SplitRequest(7, "binary"),  # one chunk per share
    SplitRequest(4, "hosts", (2, 2)),
    SplitRequest(5, "hosts", (1, 3, 1)),
]


def _run(kernel, dims, inputs, scalars, cluster_values, split):
    plain = {n: a.copy() for n, a in inputs.items()}
    run_kernel(kernel, bind(kernel, dims), plain, scalars)
    program = compile_cluster(kernel, dims, cluster_values=cluster_values, split=split)
    clustered = {n: a.copy() for n, a in inputs.items()}
    run_program(program, clustered, scalars)
    return program, plain, clustered


@pytest.mark.parametrize("split", TREES, ids=lambda s: f"{s.shares}-{s.shape}{list(s.hosts) or ''}")
def test_split_k_matmul_equals_the_plain_kernel(split):
    kernel = small("matmul_small")
    dims = {"M": 64, "N": 64, "K": 448}  # 7 chunks of TILE_K = 64
    inputs = {
        "A": RNG.standard_normal((64, 448)).astype(np.float32),
        "B": RNG.standard_normal((448, 64)).astype(np.float32),
        "C": RNG.standard_normal((64, 64)).astype(np.float32),
    }
    values = {"TILE_M": 32, "TILE_N": 32, "TILE_K": 64}
    program, plain, clustered = _run(kernel, dims, inputs, {"alpha": 1.5, "beta": -0.5}, values, split)
    # The same 448 products per element summed in another grouping: each f32 addition of terms of
    # size ~sqrt(448) rounds by ~2^-24 of ~60, so differences stay far below 1e-3.
    np.testing.assert_allclose(clustered["C"], plain["C"], rtol=1e-5, atol=5e-4)
    assert len(program.units) == 4
    if split.shares > 1:
        assert program.reduction.form == "sum" and program.reduction.shares == split.shares
        assert {la.share for la in program.units[0].launches} == set(range(split.shares))


def test_split_k_of_a_plain_store():
    kernel = small("matmul_plain_small")
    dims = {"M": 64, "N": 64, "K": 320}
    inputs = {
        "A": RNG.standard_normal((64, 320)).astype(np.float32),
        "B": RNG.standard_normal((320, 64)).astype(np.float32),
        "C": np.full((64, 64), 7.0, np.float32),  # old contents play no part in `C = acc`
    }
    values = {n: v for n, v in compile_cluster(kernel, dims).cluster_values}
    chunks = 320 // values["TILE_K"]
    program, plain, clustered = _run(kernel, dims, inputs, {}, values, SplitRequest(min(3, chunks), "binary"))
    np.testing.assert_allclose(clustered["C"], plain["C"], rtol=1e-5, atol=5e-4)
    assert "zero" not in {leaf.name for leaf in program.leaves}  # init already starts at 0


def _decode_inputs(s: int) -> dict[str, np.ndarray]:
    return {
        "Q": RNG.standard_normal((8, 16)).astype(np.float32),
        "K": RNG.standard_normal((s, 16)).astype(np.float32),
        "V": RNG.standard_normal((s, 16)).astype(np.float32),
        "O": np.zeros((8, 16), np.float32),
    }


# 896 = 7 chunks of 128; 1000 = 7 chunks of 128 and a last one of 104; 330 = 5 of 64 and one of 10.
@pytest.mark.parametrize("s,bs", [(896, 128), (1000, 128), (1024, 64), (330, 64)])
@pytest.mark.parametrize("split", TREES[:6], ids=lambda s: f"{s.shares}-{s.shape}")
def test_split_kv_decode_equals_the_plain_kernel(s, bs, split):
    kernel = small("decode_gqa_small")
    inputs = _decode_inputs(s)
    if split.shares > -(-s // bs):
        with pytest.raises(UserError, match="cannot split"):
            compile_cluster(kernel, {"G": 8, "S": s}, cluster_values={"BS": bs}, split=split)
        return
    program, plain, clustered = _run(kernel, {"G": 8, "S": s}, inputs, {"scale": 0.25}, {"BS": bs}, split)
    # Partials rescaled by exp(m_i - m) and summed in another grouping: a few f32 roundings of
    # outputs of size ~1.
    np.testing.assert_allclose(clustered["O"], plain["O"], rtol=1e-5, atol=1e-6)
    assert program.reduction.form == "softmax"
    leaves = {leaf.name for leaf in program.leaves}
    want = {"init", "step", "finish", "merge"} if split.shares > 1 else {"init", "step", "finish"}
    if s % bs:  # the last chunk's step is bound to its smaller extent and masks its edge
        want.add(f"step@S={s % bs}")
    assert leaves == want


def test_decode_against_float64():
    kernel = small("decode_gqa_small")
    inputs = _decode_inputs(2048)
    program = compile_cluster(
        kernel, {"G": 8, "S": 2048}, cluster_values={"BS": 256}, split=SplitRequest(4, "binary")
    )
    out = {n: a.copy() for n, a in inputs.items()}
    run_program(program, out, {"scale": 0.25})
    q, k, v = (inputs[n].astype(np.float64) for n in "QKV")
    s = q @ k.T * 0.25
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p @ v) / p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out["O"], want, rtol=1e-4, atol=1e-5)


def test_online_softmax_loop_unsplit_is_the_plain_kernel_bit_for_bit():
    from compiler.frontend.load import load_text

    kernel = load_text(FLASH_BC, "flash.phk").kernels[0]
    dims = {"Nq": 128, "Nk": 256}
    inputs = {
        "Q": RNG.standard_normal((128, 64)).astype(np.float32),
        "K": RNG.standard_normal((256, 64)).astype(np.float32),
        "V": RNG.standard_normal((256, 64)).astype(np.float32),
        "O": np.zeros((128, 64), np.float32),
    }
    program, plain, clustered = _run(kernel, dims, inputs, {"scale": 0.125}, {"BR": 64, "BC": 64}, None)
    # One share: the partial carries (m, l, acc) from chunk to chunk exactly as the loop does.
    np.testing.assert_array_equal(clustered["O"], plain["O"])
    assert len(program.units) == 2 and [la.leaf for la in program.units[0].launches] == [
        "init",
        *["step"] * 4,
        "finish",
    ]


def test_each_launch_reads_only_what_earlier_launches_of_its_unit_wrote():
    program = compile_cluster(
        small("decode_gqa_small"),
        {"G": 8, "S": 1024},
        cluster_values={"BS": 64},
        split=SplitRequest(5, "hosts", (2, 3)),
    )
    partials = {t.name for t in program.tensors if t.role == "partial"}
    written: dict[tuple, int] = {}  # partial region -> share that wrote it last
    for launch in program.units[0].launches:
        for _, region in launch.reads:
            if region.tensor in partials:
                assert (region.tensor, region.start) in written
        for _, region in launch.writes:
            if region.tensor in partials:
                written[(region.tensor, region.start)] = launch.share
    steps = [la for la in program.units[0].launches if la.leaf == "step"]
    assert [sum(1 for la in steps if la.share == k) for k in range(5)] == [4, 3, 3, 3, 3]


@pytest.mark.parametrize(
    "request_,rounds",
    [
        (SplitRequest(4), (((0, 1),), ((0, 2),), ((0, 3),))),
        (SplitRequest(4, "binary"), (((0, 1), (2, 3)), ((0, 2),))),
        (SplitRequest(6, "binary"), (((0, 1), (2, 3), (4, 5)), ((0, 2),), ((0, 4),))),
        (SplitRequest(6, "hosts", (3, 3)), (((0, 1), (3, 4)), ((0, 2), (3, 5)), ((0, 3),))),
        (SplitRequest(3, "hosts", (1, 1, 1)), (((0, 1),), ((0, 2),))),
        (SplitRequest(1), ()),
    ],
)
def test_tree_rounds(request_, rounds):
    assert tree_rounds(request_) == rounds


@pytest.mark.parametrize("shares", range(1, 17))
@pytest.mark.parametrize("shape", ["flat", "binary", "hosts"])
def test_every_tree_merges_every_share_once_into_a_live_one(shares, shape):
    hosts = (
        tuple(n for n in (shares // 3, shares // 3, shares - 2 * (shares // 3)) if n)
        if shape == "hosts"
        else ()
    )
    rounds = tree_rounds(SplitRequest(shares, shape, hosts))
    merged: set[int] = set()
    for merges in rounds:
        busy = [s for m in merges for s in m]
        assert len(busy) == len(set(busy))  # a share takes part in one merge per round
        for into, source in merges:
            assert into not in merged and source not in merged
            merged.add(source)
    assert merged == set(range(1, shares))


def test_share_chunks_are_contiguous_and_balanced():
    assert share_chunks(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    assert share_chunks(4, 4) == [range(i, i + 1) for i in range(4)]


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(shares=0), "positive integer"),
        (dict(shares=2, shape="ring"), "unknown reduction tree 'ring'"),
        (dict(shares=4, shape="hosts", hosts=(2, 1)), "summing to 4"),
    ],
)
def test_bad_split_requests(kw, message):
    with pytest.raises(UserError, match=message):
        SplitRequest(**kw)


# test_reject's MATMUL without its @aligned promise, so that every dimension may be ragged.
RAGGED_MATMUL = (
    MATMUL.replace("@aligned(M = TILE_M, N = TILE_N, K = TILE_K)\n", "")
    .replace("TILE_K in [16, 64])\n@autotune", "TILE_K in [64, 128])\n@autotune")
)


@pytest.mark.parametrize(
    "split",
    [SplitRequest(2), SplitRequest(3, "binary"), SplitRequest(4, "hosts", (1, 3))],
    ids=lambda s: f"{s.shares}-{s.shape}",
)
def test_split_k_with_ragged_super_tiles_and_a_ragged_last_chunk(split):
    from compiler.frontend.load import load_text

    kernel = load_text(RAGGED_MATMUL, "ragged.phk").kernels[0]
    dims = {"M": 80, "N": 48, "K": 200}  # last super-tiles of 16 rows and 16 columns; chunks 64, 64, 64, 8
    inputs = {
        "A": RNG.standard_normal((80, 200)).astype(np.float32),
        "B": RNG.standard_normal((200, 48)).astype(np.float32),
        "C": RNG.standard_normal((80, 48)).astype(np.float32),
    }
    values = {"TILE_M": 32, "TILE_N": 32, "TILE_K": 64}
    program, plain, clustered = _run(kernel, dims, inputs, {"alpha": 0.5, "beta": 2.0}, values, split)
    np.testing.assert_allclose(clustered["C"], plain["C"], rtol=1e-5, atol=5e-4)
    names = {leaf.name for leaf in program.leaves}
    # The merge and zero leaves of the last super-tiles are bound to their smaller extents.
    assert {"merge", "merge@M=16", "merge@N=16", "merge@M=16,N=16", "zero@M=16,N=16"} <= names
    assert any(name.startswith("step@") and "K=8" in name for name in names)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    chunks=st.integers(1, 9),
    shares=st.integers(1, 9),
    shape=st.sampled_from(["flat", "binary", "hosts"]),
    softmax=st.booleans(),
    data=st.data(),
)
def test_any_split_of_either_form_equals_the_plain_kernel(chunks, shares, shape, softmax, data):
    shares = min(shares, chunks)
    hosts = ()
    if shape == "hosts":
        cuts = sorted(data.draw(st.sets(st.integers(1, shares - 1), max_size=3))) if shares > 1 else []
        hosts = tuple(b - a for a, b in zip([0, *cuts], [*cuts, shares], strict=True))
    split = SplitRequest(shares, shape, hosts)
    rng = np.random.default_rng(chunks * 100 + shares)
    if softmax:
        s = 64 * chunks - data.draw(st.integers(0, 63))  # a ragged last chunk, masked in the leaf
        inputs = {"Q": rng.standard_normal((8, 16)), "K": rng.standard_normal((s, 16)) * 3,
                  "V": rng.standard_normal((s, 16)), "O": np.zeros((8, 16))}
        args = (small("decode_gqa_small"), {"G": 8, "S": s}, {"scale": 0.5}, {"BS": 64}, "O")
    else:
        k = 16 * chunks
        inputs = {"A": rng.standard_normal((32, k)), "B": rng.standard_normal((k, 32)),
                  "C": rng.standard_normal((32, 32))}
        args = (small("matmul_small"), {"M": 32, "N": 32, "K": k}, {"alpha": 0.5, "beta": 1.5},
                {"TILE_M": 32, "TILE_N": 32, "TILE_K": 16}, "C")
    kernel, dims, scalars, values, out = args
    inputs = {n: a.astype(np.float32) for n, a in inputs.items()}
    _, plain, clustered = _run(kernel, dims, inputs, scalars, values, split)
    np.testing.assert_allclose(clustered[out], plain[out], rtol=1e-5, atol=1e-4)
