#!/bin/bash
# One device call for the Python API (issue 20): the call-overhead benchmark first (the figure,
# against a cupy RawKernel in the same run), then the GPU tests of tests/api (every example on
# cupy and torch against the interpreter, streams, dtypes, refusals, threads, the autotune cache,
# the doc's GPU example; and the torch-in-host-memory test, which needs torch, not a GPU: the GPU
# machine is where torch is). Logs and JSON under $OUT. Run from the repo root on the GPU machine with
# the structlog/pycapnp/ml_dtypes wheels in WHL (default .whl).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; lscpu | grep 'Model name'
  python3 -c 'import sys, cupy, torch; print(sys.version.split()[0], "cupy", cupy.__version__, "torch", torch.__version__)'
} 2>&1 | tee $OUT/api-device.log
echo "+ python3 benchmarks/api_call_overhead.py --out \$OUT/api-call-overhead.json" | tee $OUT/api-call-overhead.log
timeout ${BENCH_TIMEOUT:-60} python3 benchmarks/api_call_overhead.py --out $OUT/api-call-overhead.json \
  2>&1 | tee -a $OUT/api-call-overhead.log
TORCH_HOST=tests/api/test_kernel_numpy.py::test_torch_tensors_in_host_memory_run_on_the_interpreter_in_place
echo "+ python3 -m pytest -m gpu tests/api -v -p no:cacheprovider -rs --durations=12" | tee $OUT/api-gpu-tests.log
timeout ${TEST_TIMEOUT:-150} python3 -m pytest -m gpu tests/api -v -p no:cacheprovider -rs --durations=12 \
  2>&1 | tee -a $OUT/api-gpu-tests.log | tail -40
echo "+ python3 -m pytest $TORCH_HOST -v -p no:cacheprovider" | tee -a $OUT/api-gpu-tests.log
timeout 60 python3 -m pytest $TORCH_HOST -v -p no:cacheprovider 2>&1 | tee -a $OUT/api-gpu-tests.log | tail -3
