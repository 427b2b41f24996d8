#!/bin/bash
# The third device call of 2026-12-07's fourth session: the GPU tests the second call
# (device_batch_s3.sh) did not reach before its cap, and those it failed, after their mends (the
# split-loop tests' tree-only assertions, two CUDA-core cases' pruned points, the cluster decode
# test's reference). Seven pytest processes share the GPU, each with its own cache folder; the
# tensor-core and split-loop files are dealt over several (tests/run_pytest.py's Shard).
source benchmarks/device_env.sh
mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt 2>&1
job() {  # job NAME SHARD_INDEX SHARD_TOTAL FILES/ARGS...
  local name=$1 index=$2 total=$3; shift 3
  ( export PHOBOS_CACHE_DIR=/tmp/phobos-cache-$name TEST_SHARD_INDEX=$index TEST_TOTAL_SHARDS=$total
    timeout ${TEST_TIMEOUT:-320} python3 tests/run_pytest.py -m gpu -q -p no:cacheprovider --durations=5 \
      --basetemp /tmp/gpu-tests-$name "$@" > $OUT/gpu-$name.log 2>&1; echo "rc $?" >> $OUT/gpu-$name.log ) &
}
for i in 0 1 2; do job tc$i $i 3 tests/cuda/test_cuda_tc_gpu.py; done
for i in 0 1; do job split$i $i 2 tests/cuda/test_split_loop_gpu.py; done
job rest 0 1 tests/cuda/test_chained_folds_gpu.py tests/cuda/test_fp8_gpu.py tests/cuda/test_tma_store_gpu.py tests/cuda/test_cuda_tf32_exact_gpu.py
job mended 0 1 tests/cuda/test_cuda_gpu.py tests/runtime/test_cluster_decode.py tests/cuda/test_tuner_gpu.py \
  tests/cuda/test_persistent_gpu.py
wait
for f in $OUT/gpu-*.log; do echo "== $f"; grep -E "^(FAILED|ERROR)" $f | head -5; tail -n 2 $f; done
