#!/bin/bash
# One device call: the cluster benchmarks on the GPU machine, results and log under $OUT.
# First the GPU cases (1 GPU with 1 and 2 pods), then the CPU-pod cases on that host's 16 cores;
# each stage saves its own pytest-benchmark JSON, so a stage cut short by its timeout costs only
# its own results. Run from the repo root there with .whl carried (structlog and pycapnp wheels
# for Python 3.12):
#
#   run(command="bash benchmarks/cluster_device_run.sh", carry=[".whl"], timeout_s=600)
#
# Then, here, put the returned JSON files where benchmarks/render.py finds them and render:
#   for f in FILES_AT/*__*.json; do b=$(basename $f); m=${b%%__*}; mkdir -p benchmarks/results/$m
#     cp $f benchmarks/results/$m/${b#*__}; done
#   PYTHONPATH=. .venv/bin/python benchmarks/render.py   # plots need matplotlib on the path
# Knobs: ROUNDS (timed rounds per case, default 3), GPU_TIMEOUT (default 370 s), CPU_TIMEOUT
# (default 180 s), STAGES (default "gpu cpu"). Each case's figures are also appended at once to
# $OUT/cluster-cases.jsonl, so a stage cut short by its timeout still leaves the cases it finished.
set -o pipefail
source "$(dirname "$0")/device_env.sh"
export PHOBOS_BENCH_DATA=/tmp/phobos-bench-data
export PHOBOS_BENCH_ROUNDS=${ROUNDS:-3} PHOBOS_BENCH_LOG=$OUT/cluster-cases.jsonl
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/cluster-gpu.txt
rm -rf /tmp/cluster-results
code=0
for stage in ${STAGES:-gpu cpu}; do
  limit=$([ $stage = gpu ] && echo ${GPU_TIMEOUT:-370} || echo ${CPU_TIMEOUT:-180})
  timeout $limit python3 benchmarks/main.py --cases $stage --no-render --results /tmp/cluster-results \
    2>&1 | tee $OUT/cluster-bench-$stage.log || code=1
  rm -rf /tmp/phobos-bench-data
done
# $OUT keeps files at most two folders down: flatten pytest-benchmark's layout to MACHINE__FILE.json.
for f in /tmp/cluster-results/*/*/*.json; do
  [ -e "$f" ] && cp "$f" "$OUT/$(basename "$(dirname "$(dirname "$f")")")__$(basename "$f")"
done
ls -la $OUT
exit $code
