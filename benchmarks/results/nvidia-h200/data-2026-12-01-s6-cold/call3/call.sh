#!/bin/bash
# Session 6, call C: the 16384^3 row (leaf time in the job / solo >= 0.9), twice as the code is
# and twice with the pods' (and every process's) GIL switch interval at 0.5 ms instead of 5 ms.
T0=$SECONDS
source benchmarks/device_env.sh
mkdir -p /tmp/swi && echo 'import sys; sys.setswitchinterval(0.0005)' > /tmp/swi/sitecustomize.py
for i in 1 2; do
  timeout 100 python3 benchmarks/runtime_gpu_matmul.py --out $OUT/big-base-$i.json > $OUT/big-base-$i.log 2>&1
  echo "big-base-$i rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
  PYTHONPATH=/tmp/swi:$PYTHONPATH timeout 100 python3 benchmarks/runtime_gpu_matmul.py --out $OUT/big-swi-$i.json > $OUT/big-swi-$i.log 2>&1
  echo "big-swi-$i rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
done
grep -h "leaf_fraction\|compute spans\|runtime_wall" $OUT/*.log >> $OUT/run.log
cd $OUT && tar czf results.tgz --exclude=results.tgz --exclude=run.log * && find . -maxdepth 1 -type f ! -name results.tgz ! -name run.log -delete
