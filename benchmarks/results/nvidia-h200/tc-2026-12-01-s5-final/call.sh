#!/bin/bash
# Session 5, call B (final code on main): the GPU tests against the interpreter of everything this
# session changed in the code generator (descriptors stepped per dot, the split and fit stages,
# the novel corpus and operand forms), in 8 processes; then the bf16 and TF32 matmul rows
# re-measured, since the descriptor change touches every warpgroup-MMA kernel.
set -o pipefail
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
git log -1 --format=%H > $OUT/commit.txt 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
timeout ${TEST_S:-130} python3 -m pytest -q -p no:cacheprovider -rs -n 8 tests/cuda/test_cuda_tc_gpu.py \
  tests/cuda/test_novel_gpu.py tests/cuda/test_cuda_gpu.py tests/api/test_kernel_gpu.py \
  > $OUT/gpu-tests.log 2>&1; echo "tests rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
left=$(( ${BUDGET_S:-330} - (SECONDS-T0) ))
echo "== matmul bf16 + tf32, $left s left" >> $OUT/run.log
timeout $left python3 benchmarks/leaf_tc_bench.py --only matmul,matmul_tf32 \
  --out $OUT/leaf-tc.json --latest $OUT/leaf-latest.json > $OUT/bench.log 2>&1
echo "bench rc=$? done at $((SECONDS-T0))s" >> $OUT/run.log
