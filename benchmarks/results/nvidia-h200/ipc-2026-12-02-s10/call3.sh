#!/bin/bash
# Device call 3 of ipc10 (session 10): every GPU test of pods/runtime/api/scheduler/common on the
# branch's final tree (the pool frees never-lent allocations before lent ones), then the gpu-pods
# transfer cases for the branch once. Run from main's tree on the device with the branch's tree in .gpu-ipc10:
#   run(command="bash .gpu-ipc10/benchmarks/results/nvidia-h200/ipc-2026-12-02-s10/call3.sh",
#       carry=[".gpu-ipc10"])
# Everything lands in $OUT/call3.tgz (a device call brings back at most 8 files) and summary.txt.
R=$PWD
cd $R/.gpu-ipc10 || exit 1
source benchmarks/device_env.sh
unset PYTHONDONTWRITEBYTECODE
W=$OUT/call3 && mkdir -p $W
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nproc; git -C $R log --oneline -1; } > $W/machine.txt 2>&1
echo "== branch: GPU tests" | tee -a $OUT/summary.txt
timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu tests/pod tests/runtime tests/api tests/scheduler tests/common \
  > $W/gpu-tests.log 2>&1
tail -3 $W/gpu-tests.log | tee -a $OUT/summary.txt
tr() {  # tr TREE TAG
  echo "== $2" | tee -a $OUT/summary.txt
  (cd $1 && PYTHONPATH=/tmp/site:$1 timeout 100 python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py \
    -k gpu-pods --benchmark-only -s --benchmark-json=$W/$2.json) > $W/$2.log 2>&1
  grep -E "16 MiB tile|in flight|passed|failed|rror" $W/$2.log | tee -a $OUT/summary.txt
}
(cd $R && python3 -m compileall -q -j 0 common compiler pod scheduler schemas phobos benchmarks tests > /dev/null)
tr $R/.gpu-ipc10 branch-1
cp $OUT/summary.txt $W/
(cd $OUT && tar czf call3.tgz call3 && rm -rf call3)
