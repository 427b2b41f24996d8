#!/bin/bash
# One device call for TF32 on the TMA ring by role swap (compiler/cuda/mainloops/tma_ws/tf32.py; issue 14:
# TF32 matmul at >= 0.75x cuBLAS TF32): first the GPU tests against the interpreter (every
# `-k tf32` test of tests/cuda/test_cuda_tc_gpu.py: the TMA ring at 4 tile points x 4 ragged
# shapes, beta != 0, K = 1000 wrapping the ring, the kernel-wide opt-in, the register-staged
# ring, TF32 attention and the examples; the pods' prepared launch and phobos.Kernel with
# TFLOAT32 maps; the TF32 rounding's exact agreement with the interpreter, tests/cuda/
# test_cuda_tf32_exact_gpu.py, TMA ring included; and EXTRA_TESTS), then, only
# if every one passed, benchmarks/leaf_tc_bench.py --only matmul_tf32 (tuned at 4096, whose
# space holds the TMA ring as a family of its own; cuBLAS TF32 and Triton anchors in the same
# run), with clocks and power in dmon.log. Everything goes under $OUT, within 540 s (tests 200 s
# at most, benchmark 320 s at most). unverified_device_run.sh does the work; BENCH_ARGS
# (e.g. "--matmul-sizes 8192,16384") is added to the benchmark's arguments.
select="tf32 or tma_ring_through or tuned_to_the_tma_ring"
files="tests/api/test_kernel_gpu.py tests/cuda/test_cuda_tf32_exact_gpu.py ${EXTRA_TESTS}"
TEST_ARGS="-k '$select' $files" ONLY=matmul_tf32 \
  TEST_TIMEOUT=${TEST_TIMEOUT:-200} BENCH_TIMEOUT=${BENCH_TIMEOUT:-320} \
  exec bash "$(dirname "$0")/unverified_device_run.sh"
