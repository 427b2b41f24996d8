#!/bin/bash
# One device call for the tensor-core leaves: their GPU tests and the f32 leaves' GPU tests, then
# benchmarks/leaf_tc_bench.py (anchors in the same run), then the f32 leaf benchmark (matmul and
# attention keep their speed). Logs and JSON under $OUT. Run from the repo root on the GPU machine
# with the structlog/pycapnp/ml_dtypes wheels in WHL (default .whl). TESTS / TEST_ARGS narrow the
# tests (pytest paths, then e.g. -k), BENCH_ARGS the benchmark (e.g. --only matmul,matmul_tf32).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee $OUT/bench.log
timeout ${TEST_TIMEOUT:-200} python3 -m pytest ${TESTS:-tests/cuda/test_cuda_tc_gpu.py tests/cuda/test_cuda_gpu.py} -q -p no:cacheprovider ${TEST_ARGS} \
  2>&1 | tee $OUT/gpu_tests.log | tail -15
timeout ${BENCH_TIMEOUT:-300} python3 benchmarks/leaf_tc_bench.py --out $OUT/leaf-tc.json --latest $OUT/leaf-latest.json \
  ${BENCH_ARGS} 2>&1 | tee -a $OUT/bench.log | grep -v '^{'
if [ -n "$F32_BENCH" ]; then
  timeout ${F32_TIMEOUT:-120} python3 benchmarks/leaf_bench.py --only matmul,flash,causal --matmul-sizes 8192 \
    --attention-sizes 16384 --out $OUT/leaf-f32.json 2>&1 | tee $OUT/bench_f32.log | grep -A20 summary
fi
