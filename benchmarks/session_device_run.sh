#!/bin/bash
# One device call after the merges of 2026-12-07 (issues 34, 36, 37): the GPU tests of the areas
# they changed (new built-ins, the autotune cache/pruning/parallel compile, CompiledLeaf shipped to
# GPU pods), then first-call and cached-call time of bf16 matmul against cuBLAS. Logs under $OUT.
set -o pipefail
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1 | tee $OUT/device.log
T="tests/cuda/test_builtins_gpu.py tests/cuda/test_cuda_gpu.py tests/api/test_kernel_gpu.py
   tests/pod/test_backend_gpu.py tests/runtime/test_gpu.py tests/cluster/test_gpu_leaves.py"
echo "+ python3 -m pytest -m gpu $T" | tee $OUT/gpu-tests.log
timeout ${TEST_TIMEOUT:-330} python3 -m pytest -m gpu $T -q -p no:cacheprovider -rs -x --durations=8 \
  2>&1 | tee -a $OUT/gpu-tests.log | tail -40
echo "+ python3 benchmarks/first_call.py --sizes 4096 8192 --out \$OUT/first-call.json" | tee $OUT/first-call.log
timeout ${BENCH_TIMEOUT:-200} python3 benchmarks/first_call.py --sizes 4096 8192 --out $OUT/first-call.json \
  2>&1 | tee -a $OUT/first-call.log | tail -30
