"""The novel-kernel corpus (tests/cuda/novel/*.phk): kernels a GPU-kernel engineer might write that
the examples do not cover (operand tiles shared by dots of different precisions or roles, operands
computed in registers, transposes in each position, several accumulators, reductions after a dot,
odd tile sizes, batched grids, i32, scalars folded in). For each: ragged dims, an independent numpy
formula of its outputs (in float64 from the rounded inputs, rounding where the kernel rounds), a
tolerance against it, one for the GPU against the interpreter, and the deterministic sample of
(tile point, schedule) pairs that the PTX and GPU tests compile (`sample`)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cuda_cases
import numpy as np

from compiler.cuda import stages
from compiler.cuda.compiled import generate_source
from compiler.cuda.schedule import DEFAULT, Schedule
from compiler.cuda.tuning import autotune
from compiler.frontend import binding, ir
from compiler.frontend import load as frontend
from compiler.frontend.diagnostics import CompileError

NOVEL = Path(__file__).resolve().parent / "novel"
STORAGE = {**cuda_cases.STORAGE, "f32": np.float32, "i32": np.int32}

# Norm-wise relative errors. EXACT: products exact (16-bit or f32 operands, TF32 rounded alike on
# both sides), sums in f32 in another order. F16_FLIPS / BF16_FLIPS, the GPU against the
# interpreter where the kernel rounds to f16 / bf16 (an output, attention's p, a hidden layer): a
# value may land on the neighbouring one when the f32 before it differs in its last bits (a
# fast-math exp, another order of the sum); one flip in every element would be 2^-11 / 2^-8.
# Against numpy, which rounds only what the formula says (not attention's p), each case has its own.
EXACT = 1e-5
# f32 attention on the GPU against the interpreter: fast-math exp a few ulp off and sums in
# another order, nothing rounded to 16 bits (test_cuda_gpu.py's flash attention bound)
F32_ATTENTION = 3e-5
F16_FLIPS = 2**-11
BF16_FLIPS = 2**-8


def tf32(x: np.ndarray) -> np.ndarray:
    """Round to TF32 (10 mantissa bits), to nearest, ties to even, as the language defines it."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.asarray(x, np.float32).astype(STORAGE[dtype]).astype(np.float64)


def blocks(x: np.ndarray, t: int) -> list[np.ndarray]:
    """Row blocks of t rows, the last padded with zeros (a slice past the tensor reads 0)."""
    out = []
    for r in range(0, x.shape[0], t):
        b = np.zeros((t, *x.shape[1:]))
        b[: min(t, x.shape[0] - r)] = x[r : r + t]
        out.append(b)
    return out


def softmax_rows(s: np.ndarray) -> np.ndarray:
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def _attention(q, k, v, scale, causal=False):
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    return softmax_rows(s) @ v


def _syrk(a, env):
    t = env["T"]
    return {"C": np.concatenate([b @ b.T for b in blocks(a["X"], t)])[: a["X"].shape[0], :t]}


def _sq(a, env):
    t = env["T"]
    return {"C": np.concatenate([b[:, :t] @ b[:, :t] for b in blocks(a["A"], t)])[: a["A"].shape[0]]}


def _twoloops(a, env):
    c = a["A"] @ a["B"] + a["D"] @ a["E"]
    tn, n = env["TN"], c.shape[1]
    rs = np.stack([c[:, j : j + tn].sum(1) for j in range(0, n, tn)], axis=1)
    return {"C": c, "rs": rs}


def _masked(a, s):
    k = a["A"].shape[1]
    am = np.where(np.arange(k)[None, :] < k - 8, a["A"], 0.0)
    return {"C": am @ rounded(np.maximum(a["B"], s["thr"]), "f16")}


def _silu_gate(a):
    g, u = a["X"] @ a["W1"], a["X"] @ a["W3"]
    return {"Y": rounded(g / (1 + np.exp(-g)) * u, "bf16")}


def _onehot(a):
    ids, table = a["idx"].astype(int), a["E"]
    inside = (ids >= 0) & (ids < table.shape[0])
    return {"out": np.where(inside[:, None], table[np.clip(ids, 0, table.shape[0] - 1)], 0.0)}


def _qscaled(a, s):
    return rounded(a["Q"] * np.float32(s["scale"]), "bf16")


def _splitk(a, env):
    ks, k = env["KS"], a["A"].shape[1]
    return {"P": np.stack([a["A"][:, z : z + ks] @ a["B"][z : z + ks] for z in range(0, k, ks)])}


def _qtwo(a, env):
    x, tm = a["X"], env["TM"]
    d = [x[i : i + tm].T @ a["Z"][i : i + tm] for i in range(0, x.shape[0], tm)]
    return {"C": x @ a["Y"].T, "D": np.stack(d)}


@dataclass(frozen=True)
class Case:
    dims: dict[str, int]
    ref: Callable  # (arrays in float64, scalars, env) -> {stored tensor: expected}
    tol: float  # the interpreter against ref
    gpu_tol: float = EXACT  # the GPU against the interpreter
    scalars: dict[str, float] = field(default_factory=dict)
    ints: tuple[int, int] = (-4, 5)  # the range of i32 inputs


MM = {"M": 200, "N": 136, "K": 104}
ATT = {"scale": 0.125}
CASES: dict[str, Case] = {
    "attn_mixed": Case(
        {"H": 2, "N": 150, "D": 64},
        lambda a, s, e: {"O": _attention(tf32(a["Q"]), tf32(a["K"]), a["V"], s["scale"])},
        EXACT, F32_ATTENTION, ATT,  # P V exact: in TF32 it would be ~2e-4 off
    ),
    "atb": Case({"M": 130, "N": 200, "K": 72}, lambda a, s, e: {"C": a["A"].T @ a["B"]}, EXACT),
    "attn_f16_96": Case(
        {"H": 2, "N": 150, "D": 96},
        lambda a, s, e: {"O": _attention(a["Q"], a["K"], a["V"], s["scale"])},
        5e-4, F16_FLIPS, ATT,
    ),
    "attn_tf32_96": Case(
        {"H": 2, "N": 150, "D": 96},
        lambda a, s, e: {"O": _attention(tf32(a["Q"]), tf32(a["K"]), tf32(a["V"]), s["scale"])},
        5e-4, F16_FLIPS, ATT,
    ),
    "b2b": Case(
        {"M": 200, "K": 104, "H": 64, "N": 64},
        lambda a, s, e: {"C": tf32(np.maximum(tf32(a["A"]) @ tf32(a["W1"]), 0)) @ tf32(a["W2"])},
        1e-4, F16_FLIPS,
    ),
    "battn": Case(
        {"Bt": 2, "H": 2, "N": 150, "D": 32},
        lambda a, s, e: {"O": _attention(a["Q"], a["K"], a["V"], s["scale"], causal=True)},
        3e-3, BF16_FLIPS, ATT,
    ),
    "bmm": Case({"Bt": 3, "M": 130, "N": 70, "K": 40}, lambda a, s, e: {"C": a["A"] @ a["B"]}, EXACT),
    "colsum": Case(
        {"M": 200, "N": 136, "K": 104, "MB": 4},
        lambda a, s, e: {"cs": np.stack([b.sum(0) for b in blocks(a["A"] @ a["B"], e["TM"])])},
        EXACT,
    ),
    "dual_tf32": Case(
        MM, lambda a, s, e: {"C": tf32(a["A"] * 0.5) @ tf32(a["B"]), "D": a["A"] @ a["B"]}, EXACT
    ),
    "dual_use": Case(MM, lambda a, s, e: {"C": a["A"] @ a["B"], "rs": a["A"].sum(1)}, EXACT),
    "fixedk": Case(
        {"M": 200, "N": 136},
        lambda a, s, e: {"C": a["A"] @ a["B"], "D": tf32(a["A"]) @ tf32(a["B"])},
        EXACT,
    ),
    "fma_tt": Case(
        {"M": 100, "N": 72, "K": 40},
        lambda a, s, e: {"C": a["A"].T @ a["B"].T, "D": tf32(a["A"]).T @ tf32(a["B"]).T},
        EXACT,
    ),
    "gemv": Case({"N": 300, "K": 136}, lambda a, s, e: {"y": a["x"] @ a["W"]}, EXACT),
    "gemm_ep": Case(
        MM, lambda a, s, e: {"C": s["alpha"] * a["A"] @ a["B"] + s["beta"] * a["C"]}, EXACT,
        scalars={"alpha": 0.75, "beta": -0.5},
    ),
    "imm": Case(
        {"M": 100, "N": 72, "K": 40}, lambda a, s, e: {"C": a["A"] @ a["B"] + s["off"]}, 0.0, 0.0, {"off": 3}
    ),
    "imm_tf32": Case({"M": 100, "N": 72, "K": 40}, lambda a, s, e: {"C": a["A"] @ a["B"]}, EXACT),
    "k8": Case({"M": 200, "N": 136, "K": 100}, lambda a, s, e: {"C": a["A"] @ a["B"]}, EXACT),
    "linear": Case(
        {"M": 200, "N": 136, "K": 72},
        lambda a, s, e: {"Y": rounded(np.maximum(a["X"] @ a["W"].T + a["bias"], 0), "bf16")},
        1e-4, BF16_FLIPS,
    ),
    "lse": Case(
        {"M": 200, "V": 300, "K": 96},
        lambda a, s, e: {"out": np.log(np.exp(a["X"] @ a["W"].T).sum(1))},
        EXACT,
    ),
    "masked_op": Case(MM, lambda a, s, e: _masked(a, s), EXACT, scalars={"thr": -0.25}),
    "mixprec": Case(
        MM,
        lambda a, s, e: {
            "C1": a["Ah"] @ a["Bh"], "C2": tf32(a["A"]) @ tf32(a["B"]), "C3": a["A"] @ a["B"]
        },
        EXACT,
    ),
    "mlp2": Case(
        {"M": 200, "H": 200, "D": 64},
        lambda a, s, e: {"Y": rounded(np.maximum(a["X"] @ a["W1"], 0), "f16") @ a["W2"]},
        1e-4, F16_FLIPS,
    ),
    "nested": Case(
        {"G": 3, **MM}, lambda a, s, e: {"C": np.einsum("gmk,gkn->mn", a["A"], a["B"])}, EXACT
    ),
    "nt_tf32": Case(MM, lambda a, s, e: {"C": tf32(a["A"]) @ tf32(a["B"]).T}, EXACT),
    "odd48": Case(MM, lambda a, s, e: {"C": a["A"] @ a["B"]}, EXACT),
    "odd96": Case({"M": 300, "N": 200, "K": 150}, lambda a, s, e: {"C": a["A"] @ a["B"]}, EXACT),
    # indices over every block of V and past both ends (those rows read nothing)
    "onehot": Case({"M": 200, "V": 300, "D": 64}, lambda a, s, e: _onehot(a), EXACT, ints=(-8, 308)),
    "outer": Case({"M": 200, "N": 136}, lambda a, s, e: {"C": a["a"] @ a["b"]}, EXACT),
    "qscaled": Case(
        {"H": 2, "N": 150, "D": 64},
        lambda a, s, e: {"O": rounded(_attention(_qscaled(a, s), a["K"], a["V"], 1.0), "bf16")},
        3e-3, BF16_FLIPS, ATT,
    ),
    "qtwo": Case({"M": 128, "N": 136, "K": 64, "MB": 2}, lambda a, s, e: _qtwo(a, e), EXACT),
    "regs2": Case(
        MM, lambda a, s, e: {"C": rounded(a["A"] * 2, "bf16") @ rounded(a["B"], "bf16")}, EXACT
    ),
    "scaled_a": Case(
        {"M": 200, "N": 136, "K": 72},
        lambda a, s, e: {
            "C": rounded(s["alpha"] * rounded(a["A"] * a["s"][None, :], "f16") @ a["B"], "f16")
        },
        1e-4, F16_FLIPS, {"alpha": 0.5},
    ),
    "small_m": Case(
        {"M": 40, "N": 300, "K": 136},
        lambda a, s, e: {"C": rounded(a["A"] @ a["B"].T, "bf16")},
        1e-4, BF16_FLIPS,
    ),
    "splitk": Case({"M": 200, "N": 136, "K": 300, "S": 3}, lambda a, s, e: _splitk(a, e), EXACT),
    "sq": Case({"M": 200, "N": 64}, lambda a, s, e: _sq(a, e), EXACT),
    "stt": Case(
        {"M": 128, "N": 136, "K": 40},  # K whole in one dot, not in 16s: on CUDA cores
        lambda a, s, e: {"C": rounded(a["B"].T @ a["A"], "bf16") @ a["V"]},
        1e-4, BF16_FLIPS,
    ),
    "swiglu": Case(MM, lambda a, s, e: _silu_gate(a), 1e-4, BF16_FLIPS),
    "syrk_diag": Case({"M": 200, "K": 136, "N": 64}, lambda a, s, e: _syrk(a, e), EXACT),
    "tf32_and_exact": Case(
        {"M": 130, "N": 70, "K": 100},
        lambda a, s, e: {"C": tf32(a["A"]) @ tf32(a["B"]), "D": a["A"] @ a["B"]},
        EXACT,
    ),
    "tf32_regop": Case(
        MM,
        lambda a, s, e: {"C": tf32(np.float32(a["A"]) * np.float32(s["s"])) @ tf32(np.maximum(a["B"], 0))},
        EXACT, scalars={"s": 0.7},
    ),
    "trimm": Case({"M": 200, "N": 136}, lambda a, s, e: {"C": np.tril(a["A"]) @ a["B"]}, EXACT),
    "tstore": Case(MM, lambda a, s, e: {"C": (a["A"] @ a["B"]).T}, EXACT),
    "tt_f16": Case(MM, lambda a, s, e: {"C": rounded(a["A"].T @ a["B"].T, "f16")}, 1e-4, F16_FLIPS),
    "tt_tf32": Case(MM, lambda a, s, e: {"C": tf32(a["A"]).T @ tf32(a["B"]).T}, EXACT),
    "twoloops": Case({**MM, "L": 72, "NB": 3}, lambda a, s, e: _twoloops(a, e), EXACT),
    "vt": Case(
        {"H": 2, "N": 150, "D": 64},
        lambda a, s, e: {"O": _attention(a["Q"], a["K"], np.swapaxes(a["Vt"], 1, 2), s["scale"])},
        3e-3, BF16_FLIPS, ATT,
    ),
    "unroll2": Case({"M": 200, "N": 136, "K": 200}, lambda a, s, e: {"C": a["A"] @ a["B"]}, EXACT),
}

# How many of gpu_pairs compile for sm_90 (the H200): the GPU test must run exactly these, and the
# CPU test (test_novel_ptx.py) recounts them, so that a point newly pruned fails both.
RUNS_SM90 = {
    "atb": 9, "attn_f16_96": 5, "attn_mixed": 4, "attn_tf32_96": 4, "b2b": 2, "battn": 5,
    "bmm": 9, "colsum": 3, "dual_tf32": 4, "dual_use": 3, "fixedk": 4, "fma_tt": 4,
    "gemm_ep": 8, "gemv": 5, "imm": 1, "imm_tf32": 2, "k8": 2, "linear": 9, "lse": 5,
    "masked_op": 2, "mixprec": 3, "mlp2": 6, "nested": 2, "nt_tf32": 9, "odd48": 1, "odd96": 4,
    "onehot": 3, "outer": 2, "qscaled": 4, "qtwo": 2, "regs2": 2, "scaled_a": 9, "small_m": 8,
    "splitk": 3, "sq": 2, "stt": 2, "swiglu": 6, "syrk_diag": 4, "tf32_and_exact": 8,
    "tf32_regop": 4, "trimm": 5, "tstore": 5, "tt_f16": 9, "tt_tf32": 9, "twoloops": 3,
    "unroll2": 5, "vt": 3,
}


def names() -> list[str]:
    return sorted(p.stem for p in NOVEL.glob("*.phk"))


def load(name: str) -> ir.Kernel:
    return frontend.load_file(NOVEL / f"{name}.phk").kernel()


def inputs(
    kernel: ir.Kernel, env: dict[str, int], rng: np.random.Generator, ints: tuple[int, int] = (-4, 5)
) -> dict[str, np.ndarray]:
    """Every tensor (outputs too) in its storage type: normal values, i32 uniform in [ints)."""
    arrays = {}
    for p in kernel.tensors:
        shape = tuple(d if isinstance(d, int) else env[d] for d in p.dims)
        if p.dtype == "i32":
            arrays[p.name] = rng.integers(*ints, size=shape).astype(np.int32)
        else:
            arrays[p.name] = rng.standard_normal(shape).astype(np.float32).astype(STORAGE[p.dtype])
    return arrays


def seed(name: str) -> int:
    return zlib.crc32(name.encode())


# -- what the tuner compiles, and the sample the tests compile -----------------------------------


def families(kernel: ir.Kernel, cc: int) -> list[list[Schedule]]:
    """The tuner's schedule families on a GPU of capability `cc`, each led by its probe."""
    if not stages.tensor_core_dots(kernel, False):
        return [[DEFAULT]]
    probes, spaces, _ = autotune.search_families(kernel, False, cc)
    return [[p] + [s for s in space if s != p] for p, space in zip(probes, spaces, strict=True)]


def spread(kernel: ir.Kernel, cc: int, per_schedule: int = 2) -> list[tuple[dict, Schedule]]:
    """What the tuner may compile, thinned deterministically: every tile point under each family's
    probe (the tuner compiles those), and every other schedule of a family at `per_schedule`
    points taken in turn (any point can be a finalist; the turns cover them all)."""
    points = autotune.search_points(kernel)
    out = []
    for fam in families(kernel, cc):
        out += [(p, fam[0]) for p in points]
        turn = 0
        for schedule in fam[1:]:
            for _ in range(min(per_schedule, len(points))):
                out.append((points[turn % len(points)], schedule))
                turn += 1
    return out


def first_generating(
    kernel: ir.Kernel, dims: dict[str, int], start: int, schedule: Schedule, cc: int
) -> dict | None:
    """The first tile point, in turn from the start-th, at which `schedule` gives CUDA C++ for
    `cc` (a point it prunes, with its reason asserted, is passed over); None if it prunes all."""
    points = autotune.search_points(kernel)
    for j in range(len(points)):
        point = points[(start + j) % len(points)]
        try:
            generate_source(kernel, binding.bind(kernel, dims, None, point), schedule=schedule, cc=cc)
        except CompileError as e:
            assert "is pruned" in e.message, (point, schedule.key(), e.message)
            continue
        return point
    return None


def sample(kernel: ir.Kernel, cc: int, per_family: int = 2) -> list[tuple[dict, Schedule]]:
    """A deterministic few of spread: from each family its probe and then members spread
    evenly over it (per_family in all), each at the first tile point it takes, in turn from a
    place that depends on the kernel's name (so that the corpus as a whole visits every point);
    a member pruned at every point is left out (test_novel_ptx.py counts what remains)."""
    dims, start = CASES[kernel.name].dims, seed(kernel.name)
    out = []
    for f, fam in enumerate(families(kernel, cc)):
        picks = sorted({round(i * (len(fam) - 1) / max(per_family - 1, 1)) for i in range(per_family)})
        for j, i in enumerate(picks):
            point = first_generating(kernel, dims, start + f + j, fam[i], cc)
            out += [] if point is None else [(point, fam[i])]
    return out


def gpu_pairs(kernel: ir.Kernel, cc: int) -> list[tuple[dict, Schedule]]:
    """What the GPU test runs: every point under the first family's probe (what the tuner times
    first), then the sampled probe of every family that takes some point."""
    probe = families(kernel, cc)[0][0]
    pairs = [(p, probe) for p in autotune.search_points(kernel)]
    return pairs + [x for x in sample(kernel, cc, per_family=1) if x not in pairs]
