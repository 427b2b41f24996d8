#!/bin/bash
# One device call for leaves not yet run on a GPU (patches/*-unverified, or a branch): the GPU tests the
# patches add, against the interpreter, then, only if every one passed, the leaf benchmark
# (benchmarks/leaf_tc_bench.py --only $ONLY, anchors in the same run), with the clocks and power
# once a second in dmon.log. Everything goes under $OUT. Called by the wrappers that name the
# tests and the benchmark: attention_next_device_run.sh, tf32_next_device_run.sh.
# NEW_TESTS: the default `pytest -k` selection of tests/cuda/test_cuda_tc_gpu.py; ONLY: the
# benchmark's --only. PATCHES: patch files to apply first with `git apply` (for a copy of main
# that has not taken them up; a failure to apply stops the run). TEST_ARGS replaces the test
# selection; TESTS=0 skips the tests (a second call on code whose tests passed in the first).
# BENCH_ARGS is added to the benchmark's arguments.
# Run from the repo root on the GPU machine with the structlog/pycapnp/ml_dtypes wheels in WHL.
set -o pipefail
for p in $PATCHES; do
  git apply "$p" || { echo "cannot apply $p" | tee $OUT/gpu_tests.log; exit 1; }
done
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee $OUT/bench.log
if [ "${TESTS:-1}" != 0 ]; then
  if [ -n "$TEST_ARGS" ]; then eval "set -- $TEST_ARGS"; else set -- -k "$NEW_TESTS"; fi
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest tests/cuda/test_cuda_tc_gpu.py -q -p no:cacheprovider "$@" \
    2>&1 | tee $OUT/gpu_tests.log | tail -15
  # a failing GPU test means the leaf is not the interpreter's meaning: do not time it
  grep -Eq "^[0-9]+ passed" $OUT/gpu_tests.log && ! grep -Eq "failed|error" $OUT/gpu_tests.log || exit 1
fi
nvidia-smi dmon -s pc -d 1 > $OUT/dmon.log 2>&1 &
dmon=$!
timeout ${BENCH_TIMEOUT:-330} python3 benchmarks/leaf_tc_bench.py --only $ONLY --out $OUT/leaf-tc.json \
  --latest $OUT/leaf-latest.json ${BENCH_ARGS} 2>&1 | tee -a $OUT/bench.log | grep -v '^{'
kill $dmon
