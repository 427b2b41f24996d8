"""The split-KV decode a user would write in Triton (issue 33's peer): one program per chunk of
the S keys reduces all G query rows of one KV head into a partial (m, l, acc), then one program
per query row merges the partials by the log-sum-exp rule. Written for benchmarks/decode.py;
imported only on the GPU machine (triton is there, not in the project's lock).

    splitkv_decode(q, k, v, out, scale, chunks, block_n)   q [G, D], k/v [S, D], out [G, D] f32

bf16/f16 KV: both dots on tensor cores with f32 accumulation, P rounded to the KV dtype (as the
phobos kernel's `dot(bf16(p), V)`); f32 KV: both dots in IEEE f32 (the phobos kernel's f32 dots).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _partial(q, k, v, m_out, l_out, acc_out, S, chunk, scale,
             G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BN: tl.constexpr, IEEE: tl.constexpr):
    c = tl.program_id(0)
    rows = tl.arange(0, GP)
    cols = tl.arange(0, D)
    qt = tl.load(q + rows[:, None] * D + cols[None, :], mask=rows[:, None] < G, other=0.0)
    m = tl.full((GP,), float("-inf"), tl.float32)
    l = tl.zeros((GP,), tl.float32)
    acc = tl.zeros((GP, D), tl.float32)
    start = c * chunk
    stop = tl.minimum(start + chunk, S)
    for j in range(start, stop, BN):
        n = j + tl.arange(0, BN)
        inside = n < stop
        kt = tl.load(k + n[:, None] * D + cols[None, :], mask=inside[:, None], other=0.0)
        if IEEE:
            s = tl.dot(qt, tl.trans(kt), input_precision="ieee") * scale
        else:
            s = tl.dot(qt, tl.trans(kt)) * scale
        s = tl.where(inside[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        corr = tl.exp(m - m_new)
        l = l * corr + tl.sum(p, 1)
        vt = tl.load(v + n[:, None] * D + cols[None, :], mask=inside[:, None], other=0.0)
        if IEEE:
            acc = acc * corr[:, None] + tl.dot(p, vt, input_precision="ieee")
        else:
            acc = acc * corr[:, None] + tl.dot(p.to(vt.dtype), vt)
        m = m_new
    tl.store(m_out + c * GP + rows, m)
    tl.store(l_out + c * GP + rows, l)
    tl.store(acc_out + c * GP * D + rows[:, None] * D + cols[None, :], acc)


@triton.jit
def _combine(m_in, l_in, acc_in, out, chunks, GP: tl.constexpr, D: tl.constexpr, BC: tl.constexpr):
    g = tl.program_id(0)
    cols = tl.arange(0, D)
    top = tl.full((BC,), float("-inf"), tl.float32)
    for c0 in range(0, chunks, BC):
        cs = c0 + tl.arange(0, BC)
        top = tl.maximum(top, tl.load(m_in + cs * GP + g, mask=cs < chunks, other=float("-inf")))
    big = tl.max(top, 0)
    total = tl.zeros((BC,), tl.float32)
    acc = tl.zeros((BC, D), tl.float32)
    for c0 in range(0, chunks, BC):
        cs = c0 + tl.arange(0, BC)
        mc = tl.load(m_in + cs * GP + g, mask=cs < chunks, other=float("-inf"))
        w = tl.where(mc == float("-inf"), 0.0, tl.exp(mc - big))
        total += tl.load(l_in + cs * GP + g, mask=cs < chunks, other=0.0) * w
        at = acc_in + cs[:, None] * GP * D + g * D + cols[None, :]
        part = tl.load(at, mask=(cs < chunks)[:, None], other=0.0)
        acc += part * w[:, None]
    tl.store(out + g * D + cols, tl.sum(acc, 0) / tl.sum(total, 0))


class SplitKV:
    """Scratch for `chunks` partials of G rows, made once per shape, and the two launches."""

    def __init__(self, torch, g: int, d: int, s: int, chunks: int, block_n: int, ieee: bool):
        self.g, self.gp, self.d, self.s = g, max(16, triton.next_power_of_2(g)), d, s
        self.block_n, self.ieee = block_n, ieee
        per = triton.cdiv(triton.cdiv(s, chunks), block_n) * block_n  # whole key blocks per chunk
        self.chunk, self.chunks = per, triton.cdiv(s, per)
        f32 = torch.float32
        self.m = torch.empty((self.chunks, self.gp), dtype=f32, device="cuda")
        self.l = torch.empty((self.chunks, self.gp), dtype=f32, device="cuda")
        self.acc = torch.empty((self.chunks, self.gp, d), dtype=f32, device="cuda")

    def __call__(self, q, k, v, out, scale: float) -> None:
        _partial[(self.chunks,)](q, k, v, self.m, self.l, self.acc, self.s, self.chunk, scale,
                                 G=self.g, GP=self.gp, D=self.d, BN=self.block_n, IEEE=self.ieee,
                                 num_warps=4, num_stages=3)
        _combine[(self.g,)](self.m, self.l, self.acc, out, self.chunks, GP=self.gp, D=self.d, BC=32,
                            num_warps=4)
