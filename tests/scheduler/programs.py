"""Hand-built cluster programs shaped like the cluster compiler's output (add, matmul, attention)."""

from __future__ import annotations

import itertools

from schemas.program import ClusterProgram, Launch, Leaf, Region, TensorInfo, Unit


def _leaf(name: str, tensors: tuple[str, ...], scalars: tuple[str, ...] = ()) -> Leaf:
    return Leaf(name=name, kernel="k", source="", dims=(), tile_values=(), grid=(1,), threads=256,
                tensors=tensors, scalars=scalars)


def add_program(n: int, block: int) -> ClusterProgram:
    units = []
    for i in range((n + block - 1) // block):
        r = {t: Region(t, (i * block,), (block,)) for t in "abc"}
        units.append(Unit((i,), i, (Launch("main", (("a", r["a"]), ("b", r["b"])), (("c", r["c"]),)),)))
    tensors = tuple(TensorInfo(t, "f32", (n,), "output" if t == "c" else "input") for t in "abc")
    return ClusterProgram("add", "", (("N", n),), (("BLOCK", block),), (), (len(units),), tensors, (),
                          (_leaf("main", ("a", "b", "c")),), tuple(units))


def matmul_program(m: int, n: int, k: int, tm: int, tn: int, tk: int, beta: bool = True) -> ClusterProgram:
    gm, gn, gk = m // tm, n // tn, k // tk
    units = []
    for index, (pm, pn) in enumerate(itertools.product(range(gm), range(gn))):
        c = Region("C", (pm * tm, pn * tn), (tm, tn))
        launches = [Launch("init", (("C", c),) if beta else (), (("C", c),))]
        for kt in range(gk):
            a = Region("A", (pm * tm, kt * tk), (tm, tk))
            b = Region("B", (kt * tk, pn * tn), (tk, tn))
            launches.append(Launch("step", (("A", a), ("B", b), ("C", c)), (("C", c),)))
        units.append(Unit((pm, pn), index, tuple(launches)))
    tensors = (TensorInfo("A", "f32", (m, k), "input"), TensorInfo("B", "f32", (k, n), "input"),
               TensorInfo("C", "f32", (m, n), "inout" if beta else "output"))
    leaves = (_leaf("init", ("C",), ("beta",)), _leaf("step", ("A", "B", "C"), ("alpha",)))
    return ClusterProgram("matmul", "", (("M", m), ("N", n), ("K", k)), (), (), (gm, gn), tensors,
                          ("alpha", "beta"), leaves, tuple(units))


def attention_program(nq: int, nk: int, d: int, br: int) -> ClusterProgram:
    units = []
    k, v = Region("K", (0, 0), (nk, d)), Region("V", (0, 0), (nk, d))
    for i in range(nq // br):
        q, o = Region("Q", (i * br, 0), (br, d)), Region("O", (i * br, 0), (br, d))
        units.append(Unit((i,), i, (Launch("main", (("Q", q), ("K", k), ("V", v)), (("O", o),)),)))
    tensors = tuple(TensorInfo(t, "f32", (nq if t in "QO" else nk, d), "output" if t == "O" else "input")
                    for t in "QKVO")
    return ClusterProgram("flash_attention", "", (), (), (), (len(units),), tensors, ("scale",),
                          (_leaf("main", ("Q", "K", "V", "O"), ("scale",)),), tuple(units))


def uris_of(program: ClusterProgram) -> dict[str, str]:
    return {t.name: f"file:///data/{t.name}.npy" for t in program.tensors}
