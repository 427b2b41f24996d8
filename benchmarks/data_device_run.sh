#!/bin/bash
# One device call for the runtime's data path (issue 15), results and logs under $OUT. Run from
# the repo root on the GPU machine with the wheels carried (see cluster_device_run.sh):
#
#   run(command="bash benchmarks/data_device_run.sh", carry=[".whl"], timeout_s=600)
#
# Stages (each with its own timeout, so one cut short costs only its own results):
#   tests     the GPU tests of the pod and the runtime (pinned copies, IPC, prepared launches)
#   launch    per-launch overhead of the pod's GPU backend against solo launches (< 20 us)
#   transfer  16 MiB tile between two GPU pods on one GPU (CUDA IPC), and CPU pods on loopback
#             against two plain processes with a blocking socket
#   script    the job against the cupy script on the same files, in one run, both sides:
#             tiny add 2^20 (--local-pods 1, target <= 1.0 s), matmul 8192^3 (1 running pod,
#             target <= 1.5x cupy), each with the phase breakdown from --trace
#   matmul    16384^3 through the runtime: leaf time inside the job against solo (>= 0.9)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/data-gpu.txt
code=0
stage() {  # stage NAME TIMEOUT COMMAND...
  local name=$1 limit=$2
  shift 2
  case " ${STAGES:-tests launch transfer script matmul} " in *" $name "*) ;; *) return ;; esac
  echo "== $name: $*" | tee -a $OUT/data-run.log
  timeout $limit "$@" 2>&1 | tee $OUT/data-$name.log || code=1
}
stage tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/pod tests/runtime/test_gpu.py tests/cuda/test_ptx_cache.py
stage launch 60 python3 benchmarks/launch_overhead.py --out $OUT/launch-overhead.json
stage transfer 120 python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py -k "tile_transfer" \
  --benchmark-only -s --benchmark-json=$OUT/pod-transfer.json
stage script 200 bash -c "python3 benchmarks/script_vs_job.py --device gpu --case add --n 1048576 --rounds 5 \
  --out $OUT/script-vs-job-gpu-add.json && python3 benchmarks/script_vs_job.py --device gpu --case matmul \
  --n 8192 --rounds 3 --running-pods --out $OUT/script-vs-job-gpu-matmul.json"
stage matmul 150 python3 benchmarks/runtime_gpu_matmul.py --out $OUT/runtime-gpu-matmul.json
ls -la $OUT
exit $code
