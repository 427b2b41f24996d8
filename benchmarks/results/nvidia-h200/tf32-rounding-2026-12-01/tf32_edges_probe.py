# ruff: noqa: E501  (the CUDA source lines)
"""TF32 rounding at the edges: a TMA copy through a TFLOAT32 map, cvt.rn.tf32.f32 and
cvt.rna.tf32.f32 on the same f32 bit patterns (specials, denormals, ties, near overflow)."""

import ctypes
import json
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, ".")
from compiler.cuda.mainloops.tma_ws.maps import TensorMap, _driver

SRC = r"""
extern "C" __global__ void probe(const unsigned long long tmap, const float* in, unsigned* tma_out,
                                 unsigned* rn_out, unsigned* rna_out) {
  __shared__ __align__(1024) float tile[8 * 32];
  __shared__ __align__(8) unsigned long long bar;
  unsigned b = (unsigned)__cvta_generic_to_shared(&bar), s = (unsigned)__cvta_generic_to_shared(tile);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int y = blockIdx.x * 8;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(8 * 32 * 4) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(s), "l"(tmap), "r"(0), "r"(y), "r"(b) : "memory");
  }
  asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0; @!p bra W; }" :: "r"(b) : "memory");
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    int g = blockIdx.x * 256 + i;
    tma_out[g] = __float_as_uint(tile[i]);
    unsigned rn, rna;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(rn) : "f"(in[g]));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(rna) : "f"(in[g]));
    rn_out[g] = rn; rna_out[g] = rna;
  }
}
"""
special = [
    0x0,
    0x80000000,
    0x1,
    0x80000001,
    0xFFF,
    0x1000,
    0x1001,
    0x3000,
    0x1FFF,
    0x7FFFFF,
    0x807FFFFF,
    0x7FF000,
    0x800000,
    0x7F7FFFFF,
    0xFF7FFFFF,
    0x7F7FF000,
    0x7F7FE000,
    0x7F7FEFFF,
    0x7F7FF001,
    0x7F800000,
    0xFF800000,
    0x7FC00000,
    0x7F800001,
    0x7F801000,
    0x7FBFFFFF,
    0x7FFFFFFF,
    0xFFFFFFFF,
    0xFFC00001,
    0x3F800000,
    0x3F801000,
    0x3F803000,
    0x3F802FFF,
    0x3F801001,
    0xBF801000,
    0xBF803000,
    0x33800000,
    0x00801000,
    0x00803000,
    0x00FFF000,
]
rng = np.random.default_rng(0)
bits = rng.integers(0, 2**32, size=64 * 32, dtype=np.uint64).astype(np.uint32)
bits[: len(special)] = special
x = bits.reshape(64, 32).view(np.float32)

d = cp.asarray(x)
m = TensorMap()
dims = (ctypes.c_uint64 * 2)(32, 64)
pitch = (ctypes.c_uint64 * 1)(128)
box = (ctypes.c_uint32 * 2)(32, 8)
ones = (ctypes.c_uint32 * 2)(1, 1)
res = {}
for name, code in (("TFLOAT32", 11), ("TFLOAT32_FTZ", 12)):
    err = _driver().cuTensorMapEncodeTiled(
        m.address(), code, 2, d.data.ptr, dims, pitch, box, ones, 0, 0, 3, 0
    )
    assert not err, err
    gmap = cp.asarray(np.frombuffer(ctypes.string_at(m.address(), 128), np.uint8))
    outs = [cp.zeros(64 * 32, cp.uint32) for _ in range(3)]
    k = cp.RawKernel(SRC, "probe", options=("-arch=sm_90a",))
    k((8,), (128,), (np.uint64(gmap.data.ptr), d, *outs))
    cp.cuda.runtime.deviceSynchronize()
    tma, rn, rna = (o.get() for o in outs)
    res[name] = {
        "tma_eq_cvt_rn": int((tma == rn).sum()),
        "tma_eq_cvt_rna": int((tma == rna).sum()),
        "of": int(tma.size),
        "differ_tma_vs_rn": [
            [hex(int(a)), hex(int(t)), hex(int(r))] for a, t, r in zip(bits, tma, rn, strict=False) if t != r
        ][:40],
        "specials": [
            [hex(int(a)), hex(int(t)), hex(int(r)), hex(int(q))]
            for a, t, r, q in zip(bits[: len(special)], tma, rn, rna, strict=False)
        ],
    }
print(json.dumps(res, indent=1))
