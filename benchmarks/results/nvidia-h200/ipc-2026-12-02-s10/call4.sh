#!/bin/bash
# Device call 4 of ipc10 (session 10): the one-tile gpu-pods case only, main as it is and the
# branch's final tree alternated twice (call 3's figures were low for the branch with no main
# figure beside them). Run from main's tree with the branch's tree in .gpu-ipc10:
#   run(command="bash .gpu-ipc10/benchmarks/results/nvidia-h200/ipc-2026-12-02-s10/call4.sh",
#       carry=[".gpu-ipc10"], timeout_s=40)
R=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $R/.gpu-ipc10/.whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
for t in main:$R branch:$R/.gpu-ipc10 main:$R branch:$R/.gpu-ipc10; do
  echo "== ${t%%:*}" | tee -a $OUT/summary.txt
  (cd ${t#*:} && PYTHONPATH=/tmp/site:${t#*:} python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py \
    -k "tile_transfer_16mib and gpu-pods" --benchmark-only -s) 2>&1 | grep -E "16 MiB tile|passed|failed|rror" | tee -a $OUT/summary.txt
done
