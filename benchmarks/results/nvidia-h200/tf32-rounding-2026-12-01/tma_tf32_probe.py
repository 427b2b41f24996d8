# ruff: noqa: E501  (the CUDA source lines)
"""Does a TMA copy through a TFLOAT32 tensor map round f32 to TF32, and how (rna, rne, rz)?"""

import ctypes
import json
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, ".")
from compiler.cuda.mainloops.tma_ws.maps import TensorMap, _driver

SRC = r"""
extern "C" __global__ void probe(const unsigned long long tmap, float* out, int rows) {
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
  for (int i = threadIdx.x; i < 256; i += blockDim.x) out[blockIdx.x * 256 + i] = tile[i];
}
"""


def run(dtype_code, x):
    rows = x.shape[0]
    d = cp.asarray(x)
    m = TensorMap()
    dims = (ctypes.c_uint64 * 2)(32, rows)
    pitch = (ctypes.c_uint64 * 1)(128)
    box = (ctypes.c_uint32 * 2)(32, 8)
    ones = (ctypes.c_uint32 * 2)(1, 1)
    err = _driver().cuTensorMapEncodeTiled(
        m.address(), dtype_code, 2, d.data.ptr, dims, pitch, box, ones, 0, 0, 3, 0
    )
    if err:
        return f"encode failed {err}"
    gmap = cp.asarray(np.frombuffer(ctypes.string_at(m.address(), 128), np.uint8))
    out = cp.zeros_like(d)
    k = cp.RawKernel(SRC, "probe", options=("-arch=sm_90a",))
    k((rows // 8,), (128,), (np.uint64(gmap.data.ptr), out, np.int32(rows)))
    cp.cuda.runtime.deviceSynchronize()
    return out.get()


def tf32(x, mode):
    b = x.view(np.uint32).astype(np.uint64)
    if mode == "rz":
        r = b & ~np.uint64(0x1FFF)
    elif mode == "rna":
        r = (b + 0x1000) & ~np.uint64(0x1FFF)
    else:  # rne
        r = (b + 0xFFF + ((b >> 13) & 1)) & ~np.uint64(0x1FFF)
    return (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


rng = np.random.default_rng(0)
bits = rng.integers(0, 2**32, size=(64, 32), dtype=np.uint64).astype(np.uint32)
bits = (bits & 0x3FFFFFFF) | 0x3F000000  # finite positive and negative-ish mixes
bits[0::3] |= 0x80000000
bits[:8] = (bits[:8] & ~np.uint32(0x1FFF)) | 0x1000  # exact ties
bits[8:16] = (bits[8:16] & ~np.uint32(0x3FFF)) | 0x3000  # ties with odd kept bit
x = bits.view(np.float32)
res = {}
for name, code in (("FLOAT32", 7), ("TFLOAT32", 11), ("TFLOAT32_FTZ", 12)):
    got = run(code, x)
    if isinstance(got, str):
        res[name] = got
        continue
    res[name] = {
        mode: int((got.view(np.uint32) == tf32(x, mode).view(np.uint32)).sum())
        for mode in ("rz", "rna", "rne")
    }
    res[name]["identity"] = int((got.view(np.uint32) == x.view(np.uint32)).sum())
    res[name]["of"] = x.size
    res[name]["ties_rows_0_16_sample"] = [hex(int(v)) for v in got.view(np.uint32)[8, :3]] + [
        hex(int(v)) for v in x.view(np.uint32)[8, :3]
    ]
print(json.dumps(res, indent=1))
