#!/bin/bash
# Session 6, call A: the GPU tests not yet run on the GPU (made stricter in review), the data-path
# GPU tests, then the cold row with the pinned 4096 tiles and with full-width output bands.
set -o pipefail
T0=$SECONDS
source benchmarks/device_env.sh
echo "device_env ok: PYTHONPATH=$PYTHONPATH" > $OUT/run.log
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $OUT/run.log
run() { local name=$1 limit=$2; shift 2
  timeout $limit "$@" > $OUT/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $OUT/run.log; }
run tests-cuda 240 python3 -m pytest -q -p no:cacheprovider -rs -n 8 tests/cuda/test_cuda_tc_gpu.py tests/cuda/test_novel_gpu.py tests/cuda/test_cuda_gpu.py tests/api/test_kernel_gpu.py
run tests-data 90 python3 -m pytest -q -p no:cacheprovider -rs tests/pod/test_backend_gpu.py tests/runtime/test_gpu.py
svj="python3 benchmarks/script_vs_job.py --device gpu --case matmul --n 8192 --rounds 3 --running-pods --no-local"
run cold-4096 70 $svj --cold --out $OUT/cold-4096.json
run cold-2048x8192 70 $svj --cold --cluster TILE_M=2048 --cluster TILE_N=8192 --cluster TILE_K=8192 --out $OUT/cold-2048x8192.json
run cold-1024x8192 70 $svj --cold --cluster TILE_M=1024 --cluster TILE_N=8192 --cluster TILE_K=8192 --out $OUT/cold-1024x8192.json
run warm-1024x8192 45 $svj --cluster TILE_M=1024 --cluster TILE_N=8192 --cluster TILE_K=8192 --out $OUT/warm-1024x8192.json
echo "done at $((SECONDS-T0))s" >> $OUT/run.log
cd $OUT && tar czf results.tgz --exclude=results.tgz --exclude=run.log * && find . -maxdepth 1 -type f ! -name results.tgz ! -name run.log -delete
