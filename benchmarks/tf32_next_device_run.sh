#!/bin/bash
# One device call for the TF32 matmul after patches/tf32-unverified (issue 14: TF32 matmul at
# >= 0.75x cuBLAS TF32): first the GPU tests against the interpreter that the patches add or
# widen (TF32 on the TMA ring at 4 tile points x 4 ragged shapes, beta != 0, K = 1000 wrapping
# the ring; the kernel-wide TF32 opt-in on the TMA ring; the register-staged TF32 path; one bf16
# TMA test for the producer code the patches share), then, only if every one passed,
# benchmarks/leaf_tc_bench.py --only matmul_tf32 (tuned at 4096, whose space then holds the TMA
# ring; cuBLAS TF32 and Triton anchors in the same run), with clocks and power in dmon.log.
# Everything goes under $OUT, within 600 s (tests 200 s at most, benchmark 330 s at most).
# unverified_device_run.sh does the work and takes PATCHES, TEST_ARGS, TESTS=0 and BENCH_ARGS.
NEW_TESTS="tf32_tma_ring or tf32_opt_in_runs_on_warpgroup_mma or tf32_examples_in_source or tma_ring_through_the_pods" \
  ONLY=matmul_tf32 TEST_TIMEOUT=${TEST_TIMEOUT:-200} exec bash "$(dirname "$0")/unverified_device_run.sh"
