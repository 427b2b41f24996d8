"""mbarriers in shared memory: the helpers every kernel that uses them includes (PRELUDE) and
a ring's pair of barriers per stage (full[s], empty[s]), for the TMA ring (mainloops/tma_ws/ring.py) and the
ping-pong handover of a cp.async ring (mainloops/pingpong/handover.py)."""

from __future__ import annotations

PRELUDE = r"""
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {  // labels local to the braces
  asm volatile("{ .reg .pred p; MBAR_WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; "
               "@!p bra MBAR_WAIT; }" :: "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
""".strip("\n")


def ring(gen, stages: int, full: int, empty: int) -> str:
    """Per stage a full and an empty mbarrier, expecting `full` and `empty` arrivals per phase,
    initialised by one thread, then a CTA-wide barrier; returns the C name of full[0]'s shared
    address (full[s] at + 8 s, empty[s] at + 8 (stages + s))."""
    bars = gen.fresh("bar")
    gen.out.line(f"const unsigned {bars} = smem_u32({gen.smem.alloc_perm(4 * stages)});  // full[], empty[]")
    gen.out.open("if (th_id == 0)")
    loop = f"for (int s_ = 0; s_ < {stages}; ++s_)"
    gen.out.line(f"{loop} mbar_init({bars} + 8 * s_, {full});")
    gen.out.line(f"{loop} mbar_init({bars} + 8 * ({stages} + s_), {empty});")
    gen.out.line('asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");')
    gen.out.close()
    gen.out.line("__syncthreads();")
    return bars
