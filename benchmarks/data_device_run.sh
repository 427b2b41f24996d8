#!/bin/bash
# One device call for the runtime's data path (issue 15): every GPU row of the issue's Speed
# table, results and logs under $OUT (packed into data-results.tgz), in about 3 minutes. Run from the repo root on the GPU
# machine with the wheels carried (docs/performance.md, "Where a job's time goes"): the py3.12
# wheels of pycapnp, structlog, ml_dtypes and crc32c (the tiles' CRC-32C, pod/rpc/transfer.py; without
# it every tile fetched over the data port or the RPC chunks fails) in .whl/:
#
#   run(command="bash benchmarks/data_device_run.sh", carry=[".whl"], timeout_s=330)
#
# Stages, in order, each with its own time limit (one cut short costs only its own results) and
# skipped once the run is past BUDGET_S:
#   tests     the GPU tests of the data path (pinned pieces keeping each dtype, reused IPC
#             allocations, the GPU count, jobs on one and two pods of one GPU)
#   add       tiny add 2^20: --local-pods 1 command to exit (<= 1.0 s), and against a running
#             pod (first compute within 0.5 s), with the phases from --trace
#   matmul    8192^3 against one running pod, warm files: command to exit against the cupy
#             script (<= 1.5x)
#   cold      the same with the inputs out of the page cache before every command: job wall
#             against max(cold read, cuBLAS) (<= 1.2x)
#   big       16384^3 through the runtime: leaf time inside the job against solo (>= 0.9)
#   transfer  16 MiB tiles between two pods on one GPU (CUDA IPC, >= 100 GB/s): one at a time
#             and 16 in flight; the CPU pods on loopback against two plain processes
#   launch    per-launch overhead of the GPU backend against solo launches (< 20 us)
#   startup   python -X importtime of a bare interpreter and of cupy's start (the add stage
#             writes the same for its command against a running pod): where start-up goes here
set -o pipefail
BUDGET_S=${BUDGET_S:-270}
source "$(dirname "$0")/device_env.sh"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nproc; id -u;
  df -h /tmp; findmnt -T /tmp; git log --oneline -1 2>/dev/null; env | grep ^PYTHON; } > $OUT/data-machine.txt 2>&1
# the tree's bytecode, as an installed package has it (pip compiles at install)
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 common compiler pod scheduler schemas phobos benchmarks tests > /dev/null
code=0
stage() {  # stage NAME TIMEOUT COMMAND...
  local name=$1 limit=$2
  shift 2
  case " ${STAGES:-tests add matmul cold big transfer launch startup} " in *" $name "*) ;; *) return ;; esac
  if (( SECONDS + 10 > BUDGET_S )); then echo "== $name: skipped (budget)" | tee -a $OUT/data-run.log; return; fi
  (( SECONDS + limit > BUDGET_S )) && limit=$(( BUDGET_S - SECONDS ))
  echo "== $name (${SECONDS}s, limit ${limit}s): $*" | tee -a $OUT/data-run.log
  timeout $limit "$@" > $OUT/data-$name.log 2>&1
  local rc=$?
  (( rc )) && { code=1; echo "   $name: exit $rc" >> $OUT/data-run.log; }
  tail -5 $OUT/data-$name.log
}
svj="python3 benchmarks/script_vs_job.py --device gpu"
stage tests 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/pod/test_backend_gpu.py tests/runtime/test_gpu.py
stage add 40 $svj --case add --n 1048576 --rounds 5 --running-pods --out $OUT/script-vs-job-gpu-add.json \
  --importtime $OUT/importtime-add-running-pod.txt
stage matmul 45 $svj --case matmul --n 8192 --rounds 3 --running-pods --no-local --out $OUT/script-vs-job-gpu-matmul.json
stage cold 60 $svj --case matmul --n 8192 --rounds 3 --running-pods --no-local --cold --out $OUT/script-vs-job-gpu-matmul-cold.json
stage big 90 python3 benchmarks/runtime_gpu_matmul.py --out $OUT/runtime-gpu-matmul.json
stage transfer 45 python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py -k "${TRANSFER_K:-tile_transfer or window}" \
  --benchmark-only -s --benchmark-json=$OUT/pod-transfer.json
stage launch 25 python3 benchmarks/launch_overhead.py --out $OUT/launch-overhead.json
stage startup 20 bash -c "python3 -X importtime -c pass 2> $OUT/importtime-bare.txt; \
  python3 -X importtime -c 'import cupy; cupy.cuda.runtime.free(0)' 2> $OUT/importtime-cupy.txt"
echo "== done at ${SECONDS}s, exit $code" | tee -a $OUT/data-run.log
# at most 8 files come back from a device call: everything in one archive, the run's log beside it
(cd $OUT && tar czf data-results.tgz --exclude=data-results.tgz --exclude=data-run.log * && \
  find . -maxdepth 1 -type f ! -name data-results.tgz ! -name data-run.log -delete)
exit $code
