#!/bin/bash
# Session 5's device call for the cold row, run from this tree's root on the H200 machine (the
# repository root above it is main's tree, as the device gets it):
#   run(command="cd .gpu-cold5 && bash benchmarks/results/nvidia-h200/data-2026-12-01-s5-cold/call.sh",
#       carry=[".gpu-cold5"])
# 1. this tree: `STAGES="tests cold" bash benchmarks/data_device_run.sh` (the GPU tests of the data
#    path, then the cold row) -> $OUT/data-results.tgz
# 2. with BASE=1, main's tree (a copy of the repository root, with this tree's script_vs_job.py,
#    which adds each round's timeline to the JSON): the cold row -> $OUT/base/data-results.tgz
# 3. with PROBE=1, disk_probe5.py (this folder) -> $OUT/disk-probe5.json
# 4. with OTHER=DIR (a tree inside this one, say an earlier commit of this branch), that tree's
#    cold row, with this tree's script_vs_job.py -> $OUT/other/data-results.tgz
here=$PWD
STAGES=${STAGES:-"tests cold"} BUDGET_S=${BUDGET_S:-150} bash benchmarks/data_device_run.sh
if [ -n "$BASE" ]; then
  mkdir -p /tmp/base $OUT/base
  (cd .. && tar --exclude='./.gpu-*' --exclude=./.git -cf - .) | tar -C /tmp/base -xf -
  cp benchmarks/script_vs_job.py /tmp/base/benchmarks/ && cp -r .whl /tmp/base/
  (cd /tmp/base && OUT=$OUT/base STAGES="cold" BUDGET_S=80 bash benchmarks/data_device_run.sh)
fi
if [ -n "$OTHER" ]; then
  mkdir -p $OUT/other && cp benchmarks/script_vs_job.py $OTHER/benchmarks/ && cp -r .whl $OTHER/
  (cd $OTHER && OUT=$OUT/other STAGES="cold" BUDGET_S=80 bash benchmarks/data_device_run.sh)
fi
if [ -n "$PROBE" ]; then
  cd $here && PYTHONPATH=/tmp/site:$here timeout 60 python3 \
    benchmarks/results/nvidia-h200/data-2026-12-01-s5-cold/disk_probe5.py > $OUT/disk-probe5.json 2>&1
fi
exit 0
