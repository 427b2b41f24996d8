#!/bin/bash
# session 11 call 2: floor, ipc11 GPU tests, transfer A/B (ipc11 vs main) + instrumented ipc11.
# Run from main's tree on the device with the branch in .gpu-ipc11 and its instrumented copy in
# .gpu-ipc11i: run(command="bash .gpu-ipc11/call2.sh", carry=[".whl", ".gpu-ipc11", ".gpu-ipc11i"])
# (a device call brings back at most 8 files: the main-*.log/json and marks.txt did not come back)
R=$PWD
source benchmarks/device_env.sh
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 common compiler pod scheduler schemas phobos benchmarks tests .gpu-ipc11 .gpu-ipc11i > /dev/null
timeout 120 python3 benchmarks/ipc_copy_floor.py --rounds 200 > $OUT/floor.txt 2>&1
(cd .gpu-ipc11 && PYTHONPATH=/tmp/site:$R/.gpu-ipc11 timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/pod tests/runtime tests/api tests/scheduler tests/common) > $OUT/gpu-tests.log 2>&1
tail -3 $OUT/gpu-tests.log
tr() {  # tr TREE TAG
  (cd $1 && PYTHONPATH=/tmp/site:$1 PHOBOS_TRANSFER_ROUNDS=30 timeout 100 python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py \
    -k gpu-pods --benchmark-only -s --benchmark-json=$OUT/$2.json) > $OUT/$2.log 2>&1
  echo "== $2"; grep -E "16 MiB tile|in flight|passed|failed|rror" $OUT/$2.log
}
tr $R/.gpu-ipc11 ipc11-1
tr $R main-1
tr $R/.gpu-ipc11 ipc11-2
tr $R main-2
rm -f /tmp/marks-*.txt
tr $R/.gpu-ipc11i ipc11-instr
cat /tmp/marks-*.txt > $OUT/marks.txt
cat $OUT/floor.txt
