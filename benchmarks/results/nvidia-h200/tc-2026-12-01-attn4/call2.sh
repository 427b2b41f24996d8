#!/bin/bash
# attn4 call 2: the GPU tests of every warpgroup-MMA path against the interpreter (the shared
# descriptors of wgmma.issue touch matmul, TF32 and attention; the launch path keeps maps and
# argument blocks), then probe_order.py, then the benchmark row.
set -o pipefail
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
F=benchmarks/results/nvidia-h200/tc-2026-12-01-attn4
echo "+ python3 -m pytest -n 8 tests/cuda/test_cuda_tc_gpu.py tests/api/test_kernel_gpu.py -q" > $OUT/gpu_tests.log
timeout 150 python3 -m pytest -n 8 tests/cuda/test_cuda_tc_gpu.py tests/api/test_kernel_gpu.py -q -p no:cacheprovider \
  >> $OUT/gpu_tests.log 2>&1; echo "tests rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
tail -3 $OUT/gpu_tests.log >> $OUT/run.log
grep -Eq "[0-9]+ passed" $OUT/gpu_tests.log && ! grep -Eq "[0-9]+ failed|[0-9]+ error" $OUT/gpu_tests.log || exit 1
timeout 60 python3 $F/probe_order.py $OUT > $OUT/probe_order.log 2>&1; echo "probe rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
timeout $((275 - (SECONDS-T0))) python3 benchmarks/leaf_tc_bench.py --only attention_full --attention-d 128 --attention-sizes 4096 \
  --out $OUT/leaf-tc.json --latest $OUT/leaf-latest.json > $OUT/bench.log 2>&1; echo "bench rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
