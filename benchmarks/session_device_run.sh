#!/bin/bash
# One device call: the GPU tests of the paths merged lately (issues 33, 35, 36, 37, 38), then
# short benchmark passes: issue 36's rows, decode/split-K (benchmarks/decode.py), fp8 against
# torch._scaled_mm. Run from the repo root on the GPU machine with the structlog/pycapnp/ml_dtypes
# wheels in WHL (default .whl). Each step has its own time cap (env *_TIMEOUT, 0 skips the step)
# so that one slow step leaves the others their turn; the logs go into $OUT/logs.tar.gz and the
# tables into $OUT (the device tool brings back at most 8 files).
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
T=${GPU_TESTS:-"tests/cuda/test_split_loop_gpu.py tests/cuda/test_builtins_gpu.py tests/cuda/test_fp8_gpu.py
   tests/cuda/test_ints_atomics_gpu.py tests/torch_ops/test_torch_gpu.py tests/pod/test_backend_gpu.py
   tests/api/test_kernel_gpu.py"}
PHOBOS_TEST_POD_LOG=debug step gpu-tests ${TEST_TIMEOUT:-220} python3 -m pytest -m gpu $T -q \
  -p no:cacheprovider -rfs --durations=8 --basetemp /tmp/gpu-tests-tmp
find /tmp/gpu-tests-tmp -name 'pod-*.log' -size +0 | head -40 | tar czf $LOGS/pod-logs.tar.gz -T - 2>/dev/null
export PHOBOS_ISSUE36_OUT=$OUT
step issue36 ${ROWS_TIMEOUT:-150} python3 -m pytest benchmarks/test_issue36_table.py -p no:cacheprovider -q -rs \
  -k "${K36:-tf32 or matmul and 4096}"
step decode ${DECODE_TIMEOUT:-0} python3 benchmarks/decode.py --out $OUT/decode \
  ${DECODE_ARGS:---g 16,1 --log2s 16,20,22 --quick}
step fp8 ${FP8_TIMEOUT:-0} python3 benchmarks/fp8_bench.py --out $OUT/fp8-bench.md --json $OUT/fp8-bench.json \
  ${FP8_ARGS:---sizes 8192}
tar czf $OUT/logs.tar.gz -C $LOGS .
