"""Shared helpers of the CUDA tests: example kernels, their search spaces, random inputs."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np

from compiler.frontend import binding, ir
from compiler.frontend import load as frontend

STORAGE = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# Kernels that reach the operand layouts of warpgroup MMA the examples do not: A read through
# transpose (MN-major A, the descriptor's transpose bit for a) and a B tile 32 wide (not a whole
# 64-wide swizzle block: transposed into the K-major layout in shared memory).
INLINE = {
    "matmul_tn_bf16": """\
@autotune(TM in [64, 128], TN in [64, 128], TK in [32, 64])
kernel matmul_tn_bf16(At: tensor<bf16>[K, M], B: tensor<bf16>[K, N], C: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {
    let a = At[kt :+ TK, ctx.block.x * TM :+ TM]
    let b = B[kt :+ TK, ctx.block.y * TN :+ TN]
    acc += dot(transpose(a), b)
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc
}
""",
    "matmul_narrow_f16": """\
@autotune(TM in [64], TN in [32], TK in [32, 64])
kernel matmul_narrow_f16(A: tensor<f16>[M, K], B: tensor<f16>[K, N], C: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ TK], B[kt :+ TK, ctx.block.y * TN :+ TN])
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc
}
""",
}


def load_example(name: str) -> ir.Kernel:
    if name in INLINE:
        return frontend.load_text(INLINE[name], f"{name}.phk").kernel()
    return frontend.load_file(EXAMPLES / name).kernel()


def example_names() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.phk"))


def free_dims(kernel: ir.Kernel) -> list[str]:
    fixed = {d.name for d in kernel.autotune.dims} if kernel.autotune else set()
    return [d for d in binding.kernel_dims(kernel) if d not in fixed]


def all_points(kernel: ir.Kernel) -> list[dict[str, int]]:
    if kernel.autotune is None:
        return [{}]
    names = [d.name for d in kernel.autotune.dims]
    return [
        dict(zip(names, v, strict=True)) for v in itertools.product(*(d.values for d in kernel.autotune.dims))
    ]


def random_inputs(kernel: ir.Kernel, env: dict[str, int], rng: np.random.Generator):
    arrays = {}
    for p in kernel.tensors:
        shape = tuple(d if isinstance(d, int) else env[d] for d in p.dims)
        arrays[p.name] = rng.standard_normal(shape).astype(STORAGE.get(p.dtype, np.float32))
    scalars = {p.name: float(rng.uniform(0.2, 1.5)) for p in kernel.scalars}
    return arrays, scalars



def rel_err(got, want) -> float:
    """The norm-wise relative error of `got` against `want` (in float64); a non-finite output
    (an element left unwritten after NaN poisoning) or a shape mismatch fails at once."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape and np.isfinite(got).all(), "non-finite output (unwritten element?)"
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def descriptor_reads(tile, base: int, x: int, k: int) -> int:
    """The byte address at which wgmma reads operand element (x, k) of one k step of 16, for
    a descriptor starting at byte `base` with the generator's fields (the PTX ISA's canonical
    layouts, written out independently of CoreTile.offset): 8x16-byte core matrices, K-major
    without swizzle (LBO along k, SBO between 8-row groups), K-major with the 128-byte swizzle
    (128-byte rows, SBO between 8-row groups), MN-major (64-wide rows of 128 bytes, LBO between
    64-wide blocks, SBO between 8-row groups of k); the swizzle XORs address bits 4-6 with 7-9."""
    if tile.mn_major:
        a = base + (x // 64) * tile.lbo + (x % 64) * 2 + (k // 8) * tile.sbo + (k % 8) * 128
    elif tile.swizzled:  # 8 rows of 128 bytes; a k step reads 32 bytes of each row (k16 16-bit, k8 TF32)
        a = base + (x // 8) * tile.sbo + (x % 8) * 128 + k * tile.elem_bytes
    else:
        a = base + (x // 8) * tile.sbo + (k // 8) * tile.lbo + (x % 8) * 16 + (k % 8) * 2
    return a ^ (((a >> 7) & 7) << 4) if tile.swizzled else a


def ptxas(ptx: str, arch: str, folder: Path) -> str:
    """Assemble `ptx` with ptxas for `arch` (sm_80, sm_90a, ...) in `folder`, failing the test on
    its error; its verbose report (registers, spill bytes)."""
    path = folder / f"{arch}.ptx"
    path.write_text(ptx)
    done = subprocess.run(
        ["ptxas", f"-arch={arch}", "-v", str(path), "-o", str(folder / f"{arch}.cubin")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr + done.stdout


def launch_order(source: str, grid: tuple) -> list[tuple[int, int]]:
    """(ctx.block.x, ctx.block.y) of each CTA of a 2-D grid in launch order (x fastest, then y),
    from the CTA order lines (`const int cta_...`) of the generated `source`; without them the
    launch order itself, x reversed where the kernel reads `(gx - 1 - (int)blockIdx.x)`."""
    lines = [ln.strip() for ln in source.splitlines() if ln.strip().startswith("const int cta_")]
    gx, gy, _ = grid
    reversed_x = f"({gx - 1} - (int)blockIdx.x)" in source
    order = []
    for by, bx in itertools.product(range(gy), range(gx)):
        env = {"blockIdx.x": bx, "blockIdx.y": by}
        for ln in lines:
            name, expr = ln[len("const int ") : -1].split(" = ", 1)
            for k, v in env.items():
                expr = expr.replace(f"(int){k}", str(v))
            expr = expr.replace("min(", "_min(").replace("/", "//")
            env[name] = eval(expr, {"_min": min}, env)  # noqa: S307
        if lines:
            order.append((env["cta_x"], env["cta_y"]))
        else:
            order.append((gx - 1 - bx if reversed_x else bx, by))
    return order
