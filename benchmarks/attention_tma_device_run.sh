#!/bin/bash
# One device call of at most ~300 s for the bf16/f16 attention fed by a producer warpgroup's bulk
# tensor copies (compiler/cuda/mainloops/tma_ws/ring.py on a rotated loop of two dots; issue 14, D = 128): the GPU
# tests of the bulk tensor copies against the interpreter (the attention ones at ragged shapes,
# full and causal, D = 64 and 128, bf16 and f16, with and without ping-pong, and through
# phobos.Kernel; matmul's 2-D rings, whose tensor maps share the encoder), then, only if every
# one passed,
# benchmarks/leaf_tc_bench.py --only attention at D = 128 (full and causal, tuned at each N,
# anchors in the same run) and, in the time left, at D = 64, with the clocks and power once a
# second in dmon.log. Everything goes under $OUT. BUDGET (seconds, default 285) bounds the call.
# Run from the repo root on the GPU machine with the structlog/pycapnp/ml_dtypes wheels in WHL.
set -o pipefail
start=$SECONDS
left() { echo $(( ${BUDGET:-285} - (SECONDS - start) )); }
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee $OUT/bench.log
echo "+ python3 -m pytest tests/cuda/test_cuda_tc_gpu.py tests/api/test_kernel_gpu.py -k \"(tma_ring or tma_attention) and not tf32\" -q" > $OUT/gpu_tests.log
timeout ${TEST_TIMEOUT:-130} python3 -m pytest tests/cuda/test_cuda_tc_gpu.py tests/api/test_kernel_gpu.py -k "(tma_ring or tma_attention) and not tf32" -q \
  -p no:cacheprovider --durations=8 2>&1 | tee -a $OUT/gpu_tests.log | tail -30
# a failing GPU test means the leaf is not the interpreter's meaning: do not time it
grep -Eq "^[0-9]+ passed" $OUT/gpu_tests.log && ! grep -Eq "failed|error" $OUT/gpu_tests.log || exit 1
nvidia-smi dmon -s pc -d 1 > $OUT/dmon.log 2>&1 &
dmon=$!
for d in 128 64; do
  [ "$(left)" -gt 30 ] || break
  echo "== D=$d, $(left) s left" | tee -a $OUT/bench.log
  timeout "$(left)" python3 benchmarks/leaf_tc_bench.py --only attention --attention-d $d \
    --out $OUT/leaf-tc-d$d.json --latest $OUT/leaf-latest-d$d.json 2>&1 | tee -a $OUT/bench.log | grep -v '^{'
done
kill $dmon
