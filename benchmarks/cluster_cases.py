"""The cluster benchmark cases and the arithmetic around them (pure: no files, no pods, no timing).

A case is one job: a kernel from benchmarks/kernels/, its dims and scalars, one pinned @cluster
value per name, the device its pods run on and how many pods. The same problem is timed through
the whole runtime (scheduler + pods over RPC + storage) and against two yardsticks from the same
run:

- the anchor: a well-kept library computing the whole problem on one device, data already in
  memory (numpy on the CPU; cupy.matmul / torch scaled_dot_product_attention / cupy.add on a GPU);
- the bound a perfect runtime could reach: max(time to read the inputs from storage at the
  storage read bandwidth measured in the same run, time to compute at the anchor's speed).
  Reading and computing may overlap perfectly, so the larger of the two is a lower bound. Every
  pod of a case runs on one host (one CPU, or one GPU), so extra pods add no compute: the bound
  does not shrink with the pod count.

Sizes: the CPU cases are sized so that one job takes about a second on a 2-core machine (large
enough that the leaves' arithmetic, not per-instruction overhead, is most of the work, yet a
quick run of every case stays under five minutes); the GPU cases are sized so that a job reads at
most ~1 GiB from storage and attention does ~0.5 TFLOP (a few tens of ms at the anchor's speed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KERNELS = {
    # kind -> (CPU kernel, GPU kernel), files under benchmarks/kernels/
    "matmul": ("cluster_matmul.phk", "cluster_matmul_gpu.phk"),
    "attention": ("cluster_flash_attention.phk", "cluster_flash_attention_gpu.phk"),
    "add": ("cluster_add.phk", "cluster_add_gpu.phk"),
}
CPU_PODS = (1, 2, 4)
GPU_PODS = (1, 2)  # both on one GPU: the second pod shares the device


@dataclass(frozen=True)
class Problem:
    """One problem size of one kind; cases differ from it only in @cluster values and pods."""

    kind: str  # "matmul" | "attention" | "add"
    dims: tuple[tuple[str, int], ...]
    scalars: tuple[tuple[str, float], ...] = ()

    @property
    def dim(self) -> dict[str, int]:
        return dict(self.dims)

    @property
    def label(self) -> str:
        return "x".join(str(v) for _, v in self.dims)


@dataclass(frozen=True)
class Case:
    problem: Problem
    cluster_values: tuple[tuple[str, int], ...]
    device: str  # "cpu" or "gpu"
    pods: int

    @property
    def kind(self) -> str:
        return self.problem.kind

    @property
    def kernel_file(self) -> str:
        cpu, gpu = KERNELS[self.kind]
        return gpu if self.device == "gpu" else cpu

    @property
    def tile_label(self) -> str:
        values = dict(self.cluster_values)
        if len(set(values.values())) == 1 and len(values) > 1:
            return f"TILE={next(iter(values.values()))}"
        return ",".join(f"{k}={v}" for k, v in self.cluster_values)

    @property
    def id(self) -> str:
        return f"{self.device}-{self.kind}-{self.problem.label}-{self.tile_label}-pods{self.pods}"


def matmul(m: int, n: int, k: int) -> Problem:
    return Problem("matmul", (("M", m), ("N", n), ("K", k)), (("alpha", 1.5), ("beta", -0.5)))


def attention(nq: int, nk: int) -> Problem:
    # D = 64 is fixed by the kernels' @autotune; scale = 1/sqrt(D)
    return Problem("attention", (("Nq", nq), ("Nk", nk)), (("scale", 0.125),))


def add(n: int) -> Problem:
    return Problem("add", (("N", n),))


def _square_tiles(t: int) -> tuple[tuple[str, int], ...]:
    return (("TILE_M", t), ("TILE_N", t), ("TILE_K", t))


def cpu_cases() -> list[Case]:
    cases = []
    for pods in CPU_PODS:
        for t in (512, 1024, 2048):
            cases.append(Case(matmul(2048, 2048, 2048), _square_tiles(t), "cpu", pods))
        for br in (512, 1024, 2048):
            cases.append(Case(attention(8192, 4096), (("BR", br),), "cpu", pods))
        for block in (1 << 20, 1 << 22):
            cases.append(Case(add(1 << 24), (("BLOCK", block),), "cpu", pods))
    return cases


def gpu_cases() -> list[Case]:
    cases = []
    for pods in GPU_PODS:
        for t in (2048, 4096, 8192):
            cases.append(Case(matmul(8192, 8192, 8192), _square_tiles(t), "gpu", pods))
        for br in (2048, 4096, 8192):
            cases.append(Case(attention(65536, 32768), (("BR", br),), "gpu", pods))
        for block in (1 << 24, 1 << 26):
            cases.append(Case(add(1 << 27), (("BLOCK", block),), "gpu", pods))
    return cases


# ---- shapes, bytes, work ---------------------------------------------------------------------------


def tensor_shapes(problem: Problem) -> dict[str, tuple[int, ...]]:
    d = problem.dim
    if problem.kind == "matmul":
        return {"A": (d["M"], d["K"]), "B": (d["K"], d["N"]), "C": (d["M"], d["N"])}
    if problem.kind == "attention":
        return {"Q": (d["Nq"], 64), "K": (d["Nk"], 64), "V": (d["Nk"], 64), "O": (d["Nq"], 64)}
    return {"a": (d["N"],), "b": (d["N"],), "c": (d["N"],)}


def input_names(problem: Problem) -> tuple[str, ...]:
    """Tensors read from storage. C is read too: the kernel computes alpha * A @ B + beta * C."""
    return {"matmul": ("A", "B", "C"), "attention": ("Q", "K", "V"), "add": ("a", "b")}[problem.kind]


def output_name(problem: Problem) -> str:
    return {"matmul": "C", "attention": "O", "add": "c"}[problem.kind]


def input_bytes(problem: Problem) -> int:
    shapes = tensor_shapes(problem)
    return sum(4 * math.prod(shapes[name]) for name in input_names(problem))


def flops(problem: Problem) -> int:
    """Useful floating-point work: 2 per multiply-add of the matrix products (softmax and the
    epilogues are not counted, as is usual for GEMM and attention figures); 1 per add."""
    d = problem.dim
    if problem.kind == "matmul":
        return 2 * d["M"] * d["N"] * d["K"]
    if problem.kind == "attention":
        return 4 * d["Nq"] * d["Nk"] * 64
    return d["N"]


def bytes_touched(problem: Problem) -> int:
    """Bytes an elementwise kernel must move through memory: two reads and one write."""
    return 3 * 4 * problem.dim["N"] if problem.kind == "add" else 0


def make_inputs(problem: Problem, seed: int = 0) -> dict[str, np.ndarray]:
    """Every tensor of the job, outputs included (their old contents; C is read)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in tensor_shapes(problem).items():
        out[name] = rng.standard_normal(shape, dtype=np.float32)
    return out


def reference(problem: Problem, arrays: dict[str, np.ndarray], block_rows: int | None = None) -> np.ndarray:
    """The expected output, in float64 (a check of the runtime's result, not an anchor).
    Attention goes by blocks of `block_rows` query rows (default: logits of at most 512 MiB)."""
    s = dict(problem.scalars)
    if problem.kind == "matmul":
        a, b, c = (arrays[n].astype(np.float64) for n in "ABC")
        return s["alpha"] * (a @ b) + s["beta"] * c
    if problem.kind == "attention":
        k, v = (arrays[n].astype(np.float64) for n in "KV")
        out = np.empty((arrays["Q"].shape[0], v.shape[1]))
        rows = block_rows or max(1, (1 << 26) // k.shape[0])
        for r in range(0, out.shape[0], rows):
            logits = s["scale"] * (arrays["Q"][r:r + rows].astype(np.float64) @ k.T)
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            out[r:r + rows] = (p / p.sum(axis=1, keepdims=True)) @ v
        return out
    return arrays["a"].astype(np.float64) + arrays["b"].astype(np.float64)


def tolerance(problem: Problem, expected: np.ndarray) -> tuple[float, float]:
    """(rtol, atol) for comparing the runtime's f32 result with the float64 reference.

    The cluster path sums K (or the keys) in super-tile chunks and per CTA tile, in f32: a sum of
    n terms carries a relative error of about sqrt(n) * 2^-24 of the terms' magnitude, far below
    1e-4 of the output's scale for n <= 16384, while a misplaced or missing tile is off by O(1)."""
    scale = max(1.0, float(np.abs(expected).max()))
    return 1e-4, 1e-4 * scale


# ---- the bound and the ratios ------------------------------------------------------------------------


@dataclass(frozen=True)
class Yardsticks:
    anchor_s: float  # the anchor library on the whole problem, data in memory
    storage_bw: float  # bytes/s reading the inputs from storage, measured in this run
    input_bytes: int

    @property
    def read_s(self) -> float:
        return self.input_bytes / self.storage_bw

    @property
    def bound_s(self) -> float:
        return max(self.read_s, self.anchor_s)

    @property
    def bound_limited_by(self) -> str:
        return "storage" if self.read_s >= self.anchor_s else "compute"


def ratios(job_s: float, sticks: Yardsticks) -> dict[str, float | str]:
    """The figures every result carries: > 1 means slower than the yardstick."""
    return {
        "job_s": job_s,
        "anchor_s": sticks.anchor_s,
        "read_s": sticks.read_s,
        "bound_s": sticks.bound_s,
        "bound_limited_by": sticks.bound_limited_by,
        "storage_read_gbps": sticks.storage_bw / 1e9,
        "ratio_to_anchor": job_s / sticks.anchor_s,
        "ratio_to_bound": job_s / sticks.bound_s,
        "fraction_of_bound": sticks.bound_s / job_s,
    }
