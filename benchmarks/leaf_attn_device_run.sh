#!/bin/bash
# One device call for the attention leaves: every GPU test of the CUDA leaves, then the flash and
# causal attention benchmarks with the current code generator, then the same benchmarks with the
# dot k loop unrolled 4 steps (PHOBOS_CUDA_DOT_UNROLL=4; the legacy-schedule switch of 2026-11-29 was removed
# on 2026-12-01), so that both are measured in one run against the same anchors.
# BENCH_ONLY / BENCH_ARGS choose the first benchmark run, COMPARE (an environment assignment) and
# COMPARE_ONLY the second; the defaults are the run described above.
# Run from the repo root on the GPU machine with .whl carried (structlog, pycapnp wheels).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
timeout ${TEST_TIMEOUT:-40} python3 -m pytest tests/cuda/test_cuda_gpu.py -q --maxfail=8 -p no:cacheprovider 2>&1 \
  | tee $OUT/gpu_tests.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee $OUT/bench.log
timeout ${BENCH_TIMEOUT:-60} python3 benchmarks/leaf_bench.py --only ${BENCH_ONLY:-flash,causal} ${BENCH_ARGS} \
  --out $OUT/leaf_attn.json 2>&1 | tee -a $OUT/bench.log
env ${COMPARE:-PHOBOS_CUDA_DOT_UNROLL=4} timeout ${LEGACY_TIMEOUT:-45} python3 benchmarks/leaf_bench.py \
  --only ${COMPARE_ONLY:-flash,causal} --out $OUT/leaf_attn_legacy.json 2>&1 | tee $OUT/bench_legacy.log
