#!/bin/bash
# Session 6, call B: every GPU row of issue 15 on main (staging beside the head, band tiles),
# then the cold row again with 4096 x 4096 tiles for comparison.
T0=$SECONDS
mkdir -p $OUT/data && OUT=$OUT/data BUDGET_S=300 bash benchmarks/data_device_run.sh
echo "data rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
source benchmarks/device_env.sh
timeout 70 python3 benchmarks/script_vs_job.py --device gpu --case matmul --n 8192 --rounds 3 --running-pods --no-local \
  --cold --cluster TILE_M=4096 --cluster TILE_N=4096 --cluster TILE_K=4096 --out $OUT/cold-4096.json > $OUT/cold-4096.log 2>&1
echo "cold-4096 rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
git log --oneline -1 >> $OUT/run.log 2>&1
