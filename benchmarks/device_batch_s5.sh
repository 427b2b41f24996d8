#!/bin/bash
# The fourth device call of 2026-12-07's fifth session (repo root, 1x H100, wheels in .whl), after the
# tuner began loading each candidate as its compile worker sends it (pool.build_all(then=...)):
# 1. bf16 matmul's first calls (8192^3, 16384^3) from an empty phobos cache and an empty driver JIT
#    cache (CUDA_CACHE_PATH a fresh folder), each progress line stamped; compare with call 3
# 2. benchmarks/jit_load.py: whether the driver JITs several modules at once on threads or processes
# 3. the GPU tests of the tuner's path (test_tuner_gpu, and the tuned cases of the tensor-core file)
source benchmarks/device_env.sh
mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt 2>&1
CUDA_CACHE_PATH=$(mktemp -d) timeout ${FIRST_TIMEOUT:-120} python3 benchmarks/first_call.py --sizes 8192 16384 \
  --out $OUT/first-call.json 2>&1 | stamp > $OUT/first-call.log; echo "rc $?" >> $OUT/first-call.log
grep -E "candidates timed|first_call_s|^rc" $OUT/first-call.log
timeout ${JIT_TIMEOUT:-150} python3 benchmarks/jit_load.py --kernels 32 --all-modes --out $OUT/jit-load.json \
  > $OUT/jit-load.log 2>&1; echo "rc $?" >> $OUT/jit-load.log
cat $OUT/jit-load.log | tail -n 12
PHOBOS_CACHE_DIR=/tmp/phobos-cache-t timeout ${TEST_TIMEOUT:-200} python3 tests/run_pytest.py -m gpu -q \
  -p no:cacheprovider tests/cuda/test_tuner_gpu.py "tests/cuda/test_cuda_tc_gpu.py::test_tuner_searches_the_schedules_of_a_tensor_core_kernel" \
  tests/cuda/test_split_loop_gpu.py -k "tuner or tuned" > $OUT/gpu-tuner.log 2>&1; echo "rc $?" >> $OUT/gpu-tuner.log
tail -n 3 $OUT/gpu-tuner.log
