#!/bin/bash
# One device call for the work merged on 2026-12-07 (issues 33, 36, 37, 38), from the repo root on
# the GPU machine with the structlog/pycapnp/ml_dtypes/crc32c wheels in WHL (default .whl). The GPU tests
# of every new path first (correctness before speed), then short benchmark passes: decode/split-K
# (benchmarks/decode.py), fp8 against torch._scaled_mm, issue 36's rows. Each step has its own
# time cap so that one slow step leaves the others their turn; every log lands under $OUT.
set -o pipefail
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee $OUT/device.txt
T="tests/cuda/test_split_loop_gpu.py tests/cuda/test_builtins_gpu.py tests/cuda/test_fp8_gpu.py
   tests/torch_ops/test_torch_gpu.py tests/pod/test_backend_gpu.py tests/api/test_kernel_gpu.py"
echo "+ pytest -m gpu $T" > $OUT/gpu-tests.log
timeout ${TEST_TIMEOUT:-210} python3 -m pytest -m gpu $T -q -p no:cacheprovider -rfs --durations=6 \
  2>&1 | tee -a $OUT/gpu-tests.log | tail -30
timeout ${DECODE_TIMEOUT:-110} python3 benchmarks/decode.py --out $OUT/decode \
  ${DECODE_ARGS:---g 16,1 --log2s 16,20,22 --quick} 2>&1 | tee $OUT/decode.log | grep -v '^{' | tail -30
timeout ${FP8_TIMEOUT:-80} python3 benchmarks/fp8_bench.py --out $OUT/fp8-bench.md --json $OUT/fp8-bench.json \
  ${FP8_ARGS:---sizes 8192} 2>&1 | tee $OUT/fp8.log | grep -v '^{' | tail -15
export PHOBOS_ISSUE36_OUT=$OUT
timeout ${ROWS_TIMEOUT:-120} python3 -m pytest benchmarks/test_issue36_table.py -p no:cacheprovider -q -rs \
  -k "${K36:-tf32 or matmul and 4096}" 2>&1 | tee $OUT/issue36.log | tail -25
