#!/bin/bash
# One device call for fp8: its GPU tests, then benchmarks/fp8_bench.py (torch._scaled_mm in the
# same run; the table to $OUT/fp8-bench.md). Run from the repo root on the GPU machine with the
# structlog/pycapnp/ml_dtypes wheels in WHL (default .whl). `$1`: tests, bench or all (default:
# all; a device command has 10 minutes, so tests and bench may go in two calls). BENCH_ARGS
# narrows the benchmark (e.g. --sizes 4096 --forms rowwise).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
step=${1:-all}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a $OUT/bench.log
if [ "$step" != bench ]; then
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu tests/cuda/test_fp8_gpu.py -q -p no:cacheprovider -rfs \
    --durations=8 2>&1 | tee $OUT/gpu_tests.log | tail -15
fi
if [ "$step" != tests ]; then
  timeout ${BENCH_TIMEOUT:-500} python3 benchmarks/fp8_bench.py --out $OUT/fp8-bench.md --json $OUT/fp8-bench.json \
    ${BENCH_ARGS} 2>&1 | tee -a $OUT/bench.log | grep -v '^{'
fi
