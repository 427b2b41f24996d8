#!/bin/bash
# One device call of a session: GPU tests first (correctness before speed), then benchmark passes.
# Run from the repo root on the GPU machine with the structlog/pycapnp/ml_dtypes wheels in WHL
# (default .whl). Every step has its own time cap, an env variable (0 skips it), so that one slow
# step leaves the others their turn and a call fits the device's 10 minutes:
#   TEST_TIMEOUT    pytest -m gpu over GPU_TESTS (default: the split-loop, builtins, ints, tuner,
#                   pod and API GPU tests)
#   FP8T_TIMEOUT    pytest -m gpu tests/cuda/test_fp8_gpu.py
#   CDEC_TIMEOUT    the 2-pod cluster decode on one GPU (tests/runtime/test_cluster_decode.py)
#   SWEEP_TIMEOUT   benchmarks/decode_sweep.sh (its two passes; SWEEP2_TIMEOUT the second)
#   DECODE_TIMEOUT  benchmarks/decode.py $DECODE_ARGS
#   FP8_TIMEOUT     benchmarks/fp8_bench.py $FP8_ARGS
#   ROWS_TIMEOUT    benchmarks/test_issue36_table.py -k "$K36"
# Logs go into $OUT/logs.tar.gz, tables into $OUT (the device tool brings back at most 8 files).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
LOGS=/tmp/device-logs && mkdir -p $LOGS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee $OUT/device.txt
step() {  # step NAME CAP COMMAND...: run COMMAND under CAP seconds into $LOGS/NAME.log
  local name=$1 cap=$2 && shift 2
  [ "$cap" = 0 ] && return
  echo "+ $*" > $LOGS/$name.log
  timeout $cap "$@" >> $LOGS/$name.log 2>&1; echo "rc $? $name" | tee -a $LOGS/$name.log
  grep -v '^{' $LOGS/$name.log | tail -${TAIL:-25}
}
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider -rfs --durations=8"
T=${GPU_TESTS:-"tests/cuda/test_split_loop_gpu.py tests/cuda/test_builtins_gpu.py tests/cuda/test_ints_atomics_gpu.py
   tests/cuda/test_tuner_gpu.py tests/pod/test_shipped_leaf.py tests/pod/test_backend_gpu.py tests/api/test_kernel_gpu.py"}
step gpu-tests ${TEST_TIMEOUT:-220} env PHOBOS_TEST_POD_LOG=debug $PYTEST $T --basetemp /tmp/gpu-tests-tmp
find /tmp/gpu-tests-tmp -name 'pod-*.log' -size +0 2>/dev/null | head -40 | tar czf $LOGS/pod-logs.tar.gz -T - 2>/dev/null
step fp8-tests ${FP8T_TIMEOUT:-0} $PYTEST tests/cuda/test_fp8_gpu.py
step cluster-decode ${CDEC_TIMEOUT:-0} $PYTEST tests/runtime/test_cluster_decode.py
step decode-sweep ${SWEEP_TIMEOUT:-0} env OUT=$OUT/sweep DEFAULT_TIMEOUT=${SWEEP2_TIMEOUT:-55} bash benchmarks/decode_sweep.sh
step decode ${DECODE_TIMEOUT:-0} python3 benchmarks/decode.py --out $OUT/decode \
  ${DECODE_ARGS:---g 16,1 --log2s 16,20,22 --quick}
step fp8-bench ${FP8_TIMEOUT:-0} python3 benchmarks/fp8_bench.py --out $OUT/fp8-bench.md --json $OUT/fp8-bench.json \
  ${FP8_ARGS:---sizes 8192}
export PHOBOS_ISSUE36_OUT=$OUT
step issue36 ${ROWS_TIMEOUT:-0} python3 -m pytest benchmarks/test_issue36_table.py -p no:cacheprovider -q -rs \
  -k "${K36:-tf32 or matmul and 4096}"
[ -d $OUT/sweep ] && cp -r $OUT/sweep $LOGS/ && rm -rf $OUT/sweep
tar czf $OUT/logs.tar.gz -C $LOGS .
