#!/bin/bash
# One device call for issue 33 (split-loop decode): the split-loop GPU tests, then the decode and
# split-K benchmark (benchmarks/decode.py), logs and the JSON/markdown table under $OUT. Run from
# the repo root on the GPU machine with the structlog/pycapnp/ml_dtypes wheels in WHL (default .whl).
# BENCH_ARGS narrows the benchmark (e.g. "--g 16,1 --log2s 16,20,22 --quick").
set -o pipefail
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee $OUT/device.txt
timeout ${TEST_TIMEOUT:-200} python3 -m pytest tests/cuda/test_split_loop_gpu.py -m gpu -q -p no:cacheprovider -rf \
  2>&1 | tee $OUT/split-gpu-tests.log | tail -40
timeout ${BENCH_TIMEOUT:-600} python3 benchmarks/decode.py --out $OUT/decode ${BENCH_ARGS} 2>&1 | tee $OUT/decode.log | tail -60
