"""Cases of the persistent TMA ring (compiler/cuda/mainloops/tma_ws/persistent.py), shared by its CPU
tests (test_persistent.py) and GPU tests (test_persistent_gpu.py). A persistent grid of a few CTAs
(Schedule.persistent is the CTA count, not tied to the GPU's) makes small shapes walk several tiles
per CTA: tiles = k P + 1 (one CTA takes one tile more than the rest), = P + 1, whole waves (tiles =
2 P) and a remainder of two; ragged M, N and K (the copy engine clips every box), a ring that wraps
many times within and across tiles (K = 1000), one and two consumer warpgroups (TILE_M 64 / 128),
f32, bf16 and f16 outputs, a bias and ReLU, and a batch (3-D maps, tiles over z)."""

from __future__ import annotations

from compiler.cuda.schedule import Schedule


def schedule(ctas: int, tma_store: bool, stages: int = 4, order: str = "grouped") -> Schedule:
    return Schedule(None, stages, order, wgmma=True, tma=True, tma_store=tma_store, persistent=ctas)


def _mm(m: int, n: int, k: int, **more) -> dict:
    return {"M": m, "N": n, "K": k, **more}


# (kernel, dims, point, CTAs, order): its tiles and what they exercise in the comment
CASES = [
    # 3 x 3 = 9 tiles over 4 CTAs (2 P + 1), K = 1000: 16 ring iterations a tile, bf16 out, bias, ReLU
    ("linear_relu", _mm(300, 520, 1000), {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, 4, "grouped"),
    # 2 x 3 = 6 tiles over 5 CTAs (P + 1), f32 out, ragged M, N and K
    ("matmul_bf16.phk", _mm(203, 328, 136), {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, 5, "grouped"),
    # 2 x 3 = 6 tiles over 3 CTAs (whole waves of a short loop), f32 out, launch (row) order
    ("matmul_bf16.phk", _mm(256, 384, 128), {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, 3, "row"),
    # 2 x 8 = 16 tiles over 3 CTAs (5 P + 1), one consumer warpgroup, f16 operands, f32 out
    ("matmul_f16.phk", _mm(77, 1000, 264), {"TILE_M": 64, "TILE_N": 128, "TILE_K": 64}, 3, "grouped"),
    # 4 x 2 = 8 tiles over 7 CTAs (P + 1), one consumer warpgroup, f16 out, scale, f32 bias
    ("scaled_f16", _mm(203, 320, 136), {"TILE_M": 64, "TILE_N": 256, "TILE_K": 64}, 7, "grouped"),
    # 3 batches of 2 x 2 = 12 tiles over 5 CTAs (2 P + 2), bf16 out, a box clipped at a batch's end
    ("bmm", _mm(200, 256, 128, G=3), {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, 5, "grouped"),
]


def case_id(case) -> str:
    name, dims, point, ctas, order = case
    shape = "x".join(str(dims[d]) for d in ("G", "M", "N", "K") if d in dims)
    return f"{name}-{shape}-{point['TILE_M']}x{point['TILE_N']}-P{ctas}-{order}"
