#!/bin/bash
# One device call for fp8: its GPU tests, then benchmarks/fp8_bench.py (torch._scaled_mm in the
# same run; the table to $OUT/fp8-bench.md). Run from the repo root on the GPU machine with the
# structlog/pycapnp/ml_dtypes wheels in WHL (default .whl). BENCH_ARGS narrows the benchmark
# (e.g. --sizes 4096 --forms rowwise).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee $OUT/bench.log
timeout ${TEST_TIMEOUT:-240} python3 -m pytest tests/cuda/test_fp8_gpu.py tests/cuda/test_fp8_cuda.py -q \
  -p no:cacheprovider 2>&1 | tee $OUT/gpu_tests.log | tail -15
timeout ${BENCH_TIMEOUT:-330} python3 benchmarks/fp8_bench.py --out $OUT/fp8-bench.md --json $OUT/fp8-bench.json \
  ${BENCH_ARGS} 2>&1 | tee -a $OUT/bench.log | grep -v '^{'
