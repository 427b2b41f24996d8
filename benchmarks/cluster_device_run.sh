#!/bin/bash
# One device call: the cluster benchmarks on the GPU machine (GPU cases: 1 GPU with 1 and 2 pods;
# and the CPU-pod cases, which that machine's 16 cores run too), results and log under $OUT.
# Run from the repo root there with .whl carried (structlog and pycapnp wheels for Python 3.12):
#
#   run(command="bash benchmarks/cluster_device_run.sh", carry=[".whl"], timeout_s=600)
#
# Then, here: put the returned JSON where benchmarks/render.py finds it and render:
#   mkdir -p benchmarks/results/nvidia-h200 && cp FILES_AT/cluster-*.json benchmarks/results/nvidia-h200/
#   PYTHONPATH=. .venv/bin/python benchmarks/render.py       # (matplotlib on the path for the plots)
# Knobs: CASES=gpu|cpu|all (default all), ROUNDS (timed rounds per case, default 3),
# BENCH_TIMEOUT (seconds, default 540).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache PHOBOS_BENCH_DATA=/tmp/phobos-bench-data
export PHOBOS_BENCH_ROUNDS=${ROUNDS:-3}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/cluster-gpu.txt
rm -rf /tmp/cluster-results
timeout ${BENCH_TIMEOUT:-540} python3 benchmarks/main.py --cases ${CASES:-all} --no-render \
  --results /tmp/cluster-results 2>&1 | tee $OUT/cluster-bench.log
code=$?
# $OUT keeps files at most two folders down: flatten pytest-benchmark's storage layout.
for f in /tmp/cluster-results/*/*/*.json; do
  [ -e "$f" ] && cp "$f" "$OUT/cluster-$(basename "$(dirname "$(dirname "$f")")")-$(basename "$f")"
done
ls -la $OUT
exit $code
