#!/bin/bash
# The second device call of 2026-12-07's fourth session, after the first (pending_device_batch.sh)
# passed the GPU tests of persistent, chained folds, causal order, fp8 and SGEMM: run from the repo
# root on a 1x H100 with the wheels in .whl: `bash benchmarks/device_batch_s3.sh`.
# 1. every GPU test of the suite on the new defaults (schedule.PERSISTENT_TUNED,
#    split_loop/fused.ONE_LAUNCH_MEASURED): three pytest processes over disjoint files share the GPU
#    (the CPU-side compiles dominate; no test times anything), each with its own cache folder
# 2. decode at the defaults (the cost model now takes the one launch where it pays)
# 3. issue 36's fused-epilogue rows and bf16 4096^3 with the persistent ring in the search
source benchmarks/device_env.sh
mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt 2>&1
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider -rfs --durations=10"
G1="tests/cuda/test_cuda_tc_gpu.py"
G2="tests/cuda/test_novel_gpu.py tests/cuda/test_split_loop_gpu.py tests/cuda/test_fp8_gpu.py
 tests/cuda/test_tma_store_gpu.py tests/cuda/test_persistent_gpu.py tests/cuda/test_causal_order_gpu.py
 tests/cuda/test_chained_folds_gpu.py tests/cuda/test_cuda_tf32_exact_gpu.py"
G3="tests/api tests/cuda/test_cuda_gpu.py tests/pod/test_backend_gpu.py tests/cuda/test_ints_atomics_gpu.py
 tests/runtime tests/cuda/test_tuner_gpu.py tests/cuda/test_builtins_gpu.py tests/cluster/test_gpu_leaves.py
 tests/compiler/test_run_cli.py"
i=0
for g in "$G1" "$G2" "$G3"; do
  i=$((i + 1))
  ( PHOBOS_CACHE_DIR=/tmp/phobos-cache-$i timeout ${TEST_TIMEOUT:-300} $PYTEST --basetemp /tmp/gpu-tests-$i $g \
      > $OUT/gpu-tests-$i.log 2>&1; echo "rc $?" >> $OUT/gpu-tests-$i.log ) &
done
wait
tail -n 3 $OUT/gpu-tests-*.log
timeout ${DECODE_TIMEOUT:-60} python3 benchmarks/decode.py --out $OUT/decode --g 16,32 --log2s 16,20 --dtypes bf16 \
  --variants fan8+pad16,fan8+pad16+tree,fan8@2sm+pad16+st2 \
  --bs 64 --quickest --no-splitk --no-sdpa > $OUT/decode.log 2>&1; echo "rc $?" >> $OUT/decode.log
grep -v '^{' $OUT/decode.log | tail -8
PHOBOS_ISSUE36_OUT=$OUT timeout ${ROWS_TIMEOUT:-150} python3 -m pytest benchmarks/test_issue36_table.py -p no:cacheprovider \
  -q -rs -k "${K36:-linear or (matmul and bf16 and 4096)}" > $OUT/issue36.log 2>&1; echo "rc $?" >> $OUT/issue36.log
cat $OUT/issue36-*.md 2>/dev/null | tail -8
