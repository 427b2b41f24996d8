#!/bin/bash
# Session 6, call E: leaf_bench's attention (refactored, not run in call D: a wrong --only name),
# and the cold row once more on the final code.
T0=$SECONDS
source benchmarks/device_env.sh
run() { local name=$1 limit=$2; shift 2
  timeout $limit "$@" > $OUT/$name.log 2>&1
  echo "$name rc=$? at $((SECONDS-T0))s" >> $OUT/run.log; }
run leaf 150 python3 benchmarks/leaf_bench.py --only flash,causal --attention-sizes 4096 --out $OUT/leaf.json
run cold 70 python3 benchmarks/script_vs_job.py --device gpu --case matmul --n 8192 --rounds 3 --running-pods --no-local --cold --out $OUT/cold.json
cd $OUT && tar czf results.tgz --exclude=results.tgz --exclude=run.log * && find . -maxdepth 1 -type f ! -name results.tgz ! -name run.log -delete
