#!/bin/bash
# One device call: GPU tests of the CUDA leaves, then the leaf benchmarks; logs under $OUT.
# Run from the repo root on the GPU machine with .whl carried (structlog, pycapnp wheels).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
STAGE=${STAGE:-all}
if [ "$STAGE" != bench ]; then
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/cuda/test_cuda_gpu.py -q --maxfail=8 -p no:cacheprovider 2>&1 \
    | tee $OUT/gpu_tests.log
fi
if [ "$STAGE" != tests ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee $OUT/bench.log
  timeout ${BENCH_TIMEOUT:-300} python3 benchmarks/leaf_bench.py --out $OUT/leaf.json ${BENCH_ARGS} 2>&1 \
    | tee -a $OUT/bench.log
  # the same attention benchmarks with dot's k loop unrolled 4 steps instead of fully (fewer registers)
  PHOBOS_CUDA_DOT_UNROLL=4 timeout ${BENCH2_TIMEOUT:-120} python3 benchmarks/leaf_bench.py --only flash,causal \
    --out $OUT/leaf_unroll4.json 2>&1 | tee $OUT/bench_unroll4.log
  timeout ${PYBENCH_TIMEOUT:-60} python3 -m pytest benchmarks/test_leaf_speed.py -q -p no:cacheprovider --benchmark-only \
    --benchmark-json=$OUT/leaf_pytest_benchmark.json 2>&1 | tee $OUT/pybench.log
fi
