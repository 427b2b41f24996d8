"""The peer a user would most likely pick instead of phobos for one GPU: Triton. A matmul and a
flash attention written for this comparison (leaf_tc_bench.py), each autotuned over a space
comparable to ours: block shapes, warps, pipeline stages and, for the matmul, the CTA order.

Imported only on the GPU machine (triton is there, not in the project's lock)."""

from __future__ import annotations

import triton
import triton.language as tl


def _matmul_configs():
    out = []
    for bm, bn, bk, warps, stages in [
        (128, 128, 64, 4, 4),
        (128, 256, 64, 8, 3),
        (256, 128, 64, 8, 3),
        (128, 128, 32, 4, 5),
        (64, 256, 32, 4, 4),
        (128, 64, 64, 4, 4),
    ]:
        for band in (1, 8):
            out.append(
                triton.Config(
                    {"TM": bm, "TN": bn, "TK": bk, "BAND": band}, num_warps=warps, num_stages=stages
                )
            )
    return out


@triton.autotune(configs=_matmul_configs(), key=["M", "N", "K"])
@triton.jit
def _matmul(
    a,
    b,
    c,
    M,
    N,
    K,
    sa_m,
    sa_k,
    sb_k,
    sb_n,
    sc_m,
    sc_n,
    TM: tl.constexpr,
    TN: tl.constexpr,
    TK: tl.constexpr,
    BAND: tl.constexpr,
):
    # CTA order: bands of BAND row blocks, walked column by column (BAND = 1: plain row order)
    pid = tl.program_id(0)
    blocks_n = tl.cdiv(N, TN)
    in_band = BAND * blocks_n
    band_start = (pid // in_band) * BAND
    band_rows = tl.minimum(tl.cdiv(M, TM) - band_start, BAND)
    bm = band_start + (pid % in_band) % band_rows
    bn = (pid % in_band) // band_rows
    rows = bm * TM + tl.arange(0, TM)
    cols = bn * TN + tl.arange(0, TN)
    ks = tl.arange(0, TK)
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for k0 in range(0, K, TK):
        kk = k0 + ks
        x = tl.load(
            a + rows[:, None] * sa_m + kk[None, :] * sa_k,
            mask=(rows[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        y = tl.load(
            b + kk[:, None] * sb_k + cols[None, :] * sb_n,
            mask=(kk[:, None] < K) & (cols[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(x, y, acc)
    tl.store(
        c + rows[:, None] * sc_m + cols[None, :] * sc_n, acc, mask=(rows[:, None] < M) & (cols[None, :] < N)
    )


def matmul(x, y, out):
    """out[M, N] (f32) = x[M, K] @ y[K, N] (bf16 / f16, or f32 with TF32 dots)."""
    M, K = x.shape
    N = y.shape[1]

    def grid(meta):
        return (triton.cdiv(M, meta["TM"]) * triton.cdiv(N, meta["TN"]),)

    _matmul[grid](
        x, y, out, M, N, K, x.stride(0), x.stride(1), y.stride(0), y.stride(1), out.stride(0), out.stride(1)
    )
    return out


def _attention_configs():
    return [
        triton.Config({"BR": br, "BC": bc}, num_warps=w, num_stages=s)
        for br, bc, w, s in [
            (128, 64, 8, 2),
            (128, 128, 8, 2),
            (64, 64, 4, 3),
            (128, 64, 4, 3),
            (64, 128, 4, 2),
        ]
    ]


@triton.autotune(configs=_attention_configs(), key=["N", "D", "CAUSAL"])
@triton.jit
def _attention(
    q, k, v, o, N, scale, s_h, s_n, D: tl.constexpr, CAUSAL: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr
):
    # one program: BR query rows of one head; online softmax over key blocks, in base 2
    blocks = tl.cdiv(N, BR)
    pid = tl.program_id(0)
    head = tl.program_id(1)
    rb = (blocks - 1 - pid) if CAUSAL else pid  # longest rows first when causal
    rows = rb * BR + tl.arange(0, BR)
    dd = tl.arange(0, D)
    base = head * s_h
    qt = tl.load(q + base + rows[:, None] * s_n + dd[None, :], mask=rows[:, None] < N, other=0.0)
    m = tl.full((BR,), float("-inf"), tl.float32)
    l = tl.zeros((BR,), tl.float32)
    acc = tl.zeros((BR, D), tl.float32)
    c2 = scale * 1.4426950408889634
    end = tl.minimum((rb + 1) * BR, N) if CAUSAL else N
    for j in range(0, end, BC):
        cols = j + tl.arange(0, BC)
        kt = tl.load(k + base + cols[None, :] * s_n + dd[:, None], mask=cols[None, :] < N, other=0.0)
        s = tl.dot(qt, kt) * c2
        keep = cols[None, :] < N
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        fix = tl.exp2(m - m_new)
        l = l * fix + tl.sum(p, 1)
        vt = tl.load(v + base + cols[:, None] * s_n + dd[None, :], mask=cols[:, None] < N, other=0.0)
        acc = acc * fix[:, None] + tl.dot(p.to(vt.dtype), vt)
        m = m_new
    tl.store(
        o + base + rows[:, None] * s_n + dd[None, :],
        (acc / l[:, None]).to(o.dtype.element_ty),
        mask=rows[:, None] < N,
    )


def attention(q, k, v, o, scale, causal):
    """o = softmax(scale q k^T) v on [H, N, D] tensors (contiguous)."""
    H, N, D = q.shape

    def grid(meta):
        return (triton.cdiv(N, meta["BR"]), H)

    _attention[grid](q, k, v, o, N, scale, q.stride(0), q.stride(1), D=D, CAUSAL=causal)
    return o
