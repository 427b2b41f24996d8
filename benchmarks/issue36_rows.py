"""The rows of issue 36's table: each kernel as a user writes it, its sizes, and the anchor it is
measured against in the same process (benchmarks/test_issue36_table.py times them on a GPU).

Kept apart from the timing so that the CPU can check every row: each kernel parses, checks and
binds at its sizes (benchmarks/test_issue36_table.py::test_every_row_binds_on_cpu), and the table
renders (render_table)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

TF32_KERNEL_LEVEL = """
@precision(tf32)
@autotune(TILE_M in [64, 128, 256], TILE_N in [64, 128, 256], TILE_K in [16, 32, 64])
kernel matmul_tf32_kernel(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N]) {
  var acc: tile<f32>[TILE_M, TILE_N] = 0.0
  for kt in range(0, K, TILE_K) {
    let a = A[ctx.block.x * TILE_M :+ TILE_M, kt :+ TILE_K]
    let b = B[kt :+ TILE_K, ctx.block.y * TILE_N :+ TILE_N]
    acc += dot(a, b)
  }
  C[ctx.block.x * TILE_M :+ TILE_M, ctx.block.y * TILE_N :+ TILE_N] = acc
}
"""

LINEAR_BIAS_RELU = """
@autotune(TILE_M in [64, 128], TILE_N in [64, 128, 256], TILE_K in [32, 64])
kernel linear_relu(X: tensor<bf16>[M, K], W: tensor<bf16>[K, N], bias: tensor<bf16>[N],
                   Y: tensor<bf16>[M, N]) {
  var acc: tile<f32>[TILE_M, TILE_N] = 0.0
  for kt in range(0, K, TILE_K) {
    let x = X[ctx.block.x * TILE_M :+ TILE_M, kt :+ TILE_K]
    let w = W[kt :+ TILE_K, ctx.block.y * TILE_N :+ TILE_N]
    acc += dot(x, w)
  }
  let z = acc + expand(bias[ctx.block.y * TILE_N :+ TILE_N], axis = 0)
  Y[ctx.block.x * TILE_M :+ TILE_M, ctx.block.y * TILE_N :+ TILE_N] = bf16(max(z, 0.0))
}
"""

# GQA: G query heads share one K/V head (32 query heads over 8 K/V heads: G = 4)
CAUSAL_GQA = """
@autotune(BR in [64, 128, 256], BC in [32, 64, 128])
kernel causal_gqa(Q: tensor<bf16>[H, N, D], K: tensor<bf16>[HKV, N, D], V: tensor<bf16>[HKV, N, D],
                  O: tensor<bf16>[H, N, D], scale: f32) {
  let head = ctx.block.y
  let kv = head / (H / HKV)
  let row = ctx.block.x * BR
  let q = Q[head, row :+ BR, :]
  let rows = expand(row + arange(BR), axis = 1)
  var m: tile<f32>[BR] = -inf
  var l: tile<f32>[BR] = 0.0
  var acc: tile<f32>[BR, D] = 0.0
  for j in range(0, min(row + BR, N), BC) {
    let cols = expand(j + arange(BC), axis = 0)
    let s = where(cols <= rows and cols < N, dot(q, transpose(K[kv, j :+ BC, :])) * scale, -inf)
    let m_new = max(m, max(s, axis = 1))
    let p = exp(s - expand(m_new, axis = 1))
    let correction = exp(m - m_new)
    l = l * correction + sum(p, axis = 1)
    acc = acc * expand(correction, axis = 1) + dot(bf16(p), V[kv, j :+ BC, :])
    m = m_new
  }
  O[head, row :+ BR, :] = acc / expand(l, axis = 1)
}
"""


@dataclass(frozen=True)
class Row:
    name: str  # the row, as the table names it
    kind: str  # how its operands are made and its anchor run (test_issue36_table.OPERANDS)
    source: str  # the kernel's text, or "file:<examples path>"
    dims: dict  # the kernel's dimensions
    anchor: str  # what it is measured against
    target: float  # the target ratio (anchor time / phobos time)

    def text(self) -> str:
        if self.source.startswith("file:"):
            return (EXAMPLES / self.source[5:]).read_text(encoding="utf-8")
        return self.source

    def flops(self) -> float:
        d = self.dims
        if self.kind.startswith("attention"):
            full = 4 * d["H"] * d["N"] * d["N"] * d["D"]
            return full / 2 if "causal" in self.kind else full
        return 2.0 * d["M"] * d["N"] * d["K"]


def _mm(n: int, k: int | None = None, m: int | None = None) -> dict:
    return {"M": m or n, "N": n, "K": k or n}


ROWS = (
    *(Row(f"bf16 matmul {n}^3", "matmul_bf16", "file:matmul_bf16.phk", _mm(n),
          "cuBLAS bf16 (torch.matmul)", 0.95) for n in (4096, 8192, 16384)),
    Row("f32 matmul @precision(tf32) on the kernel 8192^3", "matmul_tf32", TF32_KERNEL_LEVEL, _mm(8192),
        "cuBLAS TF32 (torch.matmul, allow_tf32)", 0.95),
    Row("linear + bias + ReLU, bf16 out 8192^3", "linear_relu", LINEAR_BIAS_RELU, _mm(8192),
        "torch addmm + relu (two kernels)", 1.05),
    Row("linear + bias + ReLU, bf16 out 4096x4096x16384", "linear_relu", LINEAR_BIAS_RELU, _mm(4096, k=16384),
        "torch addmm + relu (two kernels)", 1.05),
    Row("f32 matmul (the seed's kernel) 8192^3", "matmul_f32", "file:matmul.phk", _mm(8192),
        "SGEMM (torch.matmul, no TF32)", 0.95),
    Row("attention bf16 D=128 N=4096 full, 32 heads", "attention", "file:mha_bf16.phk",
        {"H": 32, "N": 4096, "D": 128}, "cuDNN SDPA", 0.95),
    Row("attention bf16 D=128 N=4096 causal GQA 32/8 heads", "attention_causal_gqa", CAUSAL_GQA,
        {"H": 32, "HKV": 8, "N": 4096, "D": 128}, "cuDNN SDPA (causal, GQA)", 0.95),
    Row("attention bf16 one head D=64 N=16384", "attention", "file:mha_bf16.phk",
        {"H": 1, "N": 16384, "D": 64}, "cuDNN SDPA", 0.95),
)


def render_table(device: str, results: list[dict]) -> str:
    """A markdown table of `results` (one dict per row: name, anchor, phobos_ms, anchor_ms,
    first_call_s, cached_call_ms, target, progress_lines)."""
    lines = [f"# Issue 36 rows on {device}", "",
             "| kernel | phobos ms | anchor | anchor ms | anchor/phobos | target | phobos TFLOP/s | "
             "first call s | cached call ms | progress lines |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        ratio = r["anchor_ms"] / r["phobos_ms"]
        mark = "" if ratio >= r["target"] else " (below)"
        lines.append(f"| {r['name']} | {r['phobos_ms']:.4f} | {r['anchor']} | {r['anchor_ms']:.4f} | "
                     f"{ratio:.3f}x{mark} | {r['target']:.2f}x | {r['tflops']:.1f} | "
                     f"{r['first_call_s']:.2f} | {r['cached_call_ms']:.2f} | {r['progress_lines']} |")
    return "\n".join(lines) + "\n"
