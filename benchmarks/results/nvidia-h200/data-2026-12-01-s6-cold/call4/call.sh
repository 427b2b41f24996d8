#!/bin/bash
# Session 6, call D (final code): every GPU test, every GPU row of issue 15, the cold row with
# 4096 x 4096 tiles beside, the 16384^3 row twice more, and the refactored leaf benchmarks' smoke.
T0=$SECONDS
source benchmarks/device_env.sh
run() { local name=$1 limit=$2; shift 2
  timeout $limit "$@" > $OUT/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $OUT/run.log; }
run tests 240 python3 -m pytest -q -p no:cacheprovider -rs -n 8 tests/cuda/test_cuda_tc_gpu.py tests/cuda/test_novel_gpu.py \
  tests/cuda/test_cuda_gpu.py tests/cuda/test_cuda_tf32_exact_gpu.py tests/api/test_kernel_gpu.py tests/cluster/test_gpu_leaves.py \
  tests/runtime/test_calibrate_gpu.py
mkdir -p $OUT/data && (OUT=$OUT/data BUDGET_S=300 bash benchmarks/data_device_run.sh > /dev/null 2>&1)
echo "data rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
run cold-4096 70 python3 benchmarks/script_vs_job.py --device gpu --case matmul --n 8192 --rounds 3 --running-pods --no-local \
  --cold --cluster TILE_M=4096 --cluster TILE_N=4096 --cluster TILE_K=4096 --out $OUT/cold-4096.json
for i in 2 3; do run big-$i 100 python3 benchmarks/runtime_gpu_matmul.py --out $OUT/big-$i.json; done
run leaf-tc 90 python3 benchmarks/leaf_tc_bench.py --only matmul --matmul-sizes 4096 --out $OUT/leaf-tc.json
run leaf 90 python3 benchmarks/leaf_bench.py --only attention --attention-sizes 4096 --out $OUT/leaf.json
cd $OUT && tar czf results.tgz --exclude=results.tgz --exclude=run.log --exclude=data * && find . -maxdepth 1 -type f ! -name results.tgz ! -name run.log -delete
