#!/bin/bash
# session 11 call 3: floor (with a copy kernel), ipc11 GPU tests, transfer A/B + instrumented ipc11
R=$PWD
source benchmarks/device_env.sh
unset PYTHONDONTWRITEBYTECODE
W=$OUT/call3 && mkdir -p $W
python3 -m compileall -q -j 0 common compiler pod scheduler schemas phobos benchmarks tests .gpu-ipc11 .gpu-ipc11i > /dev/null
timeout 120 python3 benchmarks/ipc_copy_floor.py --rounds 200 > $W/floor.txt 2>&1
(cd .gpu-ipc11 && PYTHONPATH=/tmp/site:$R/.gpu-ipc11 timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/pod tests/runtime tests/api tests/scheduler tests/common) > $W/gpu-tests.log 2>&1
tail -3 $W/gpu-tests.log | tee $W/summary.txt
tr() {  # tr TREE TAG
  (cd $1 && PYTHONPATH=/tmp/site:$1 PHOBOS_TRANSFER_ROUNDS=30 timeout 100 python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py \
    -k gpu-pods --benchmark-only -s --benchmark-json=$W/$2.json) > $W/$2.log 2>&1
  echo "== $2" | tee -a $W/summary.txt; grep -E "16 MiB tile|in flight|passed|failed|rror" $W/$2.log | tee -a $W/summary.txt
}
tr $R/.gpu-ipc11 ipc11-1
tr $R main-1
tr $R/.gpu-ipc11 ipc11-2
rm -f /tmp/marks-*.txt
tr $R/.gpu-ipc11i ipc11-instr
cat /tmp/marks-*.txt > $W/marks.txt
cat $W/floor.txt
(cd $OUT && tar czf call3.tgz call3 && rm -rf call3)
