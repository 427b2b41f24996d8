#!/bin/bash
# Session 7, call B: the cold 8192^3 row, final main against session 6's last commit (6078f32,
# in .gpu-old), alternated twice in one call.
T0=$SECONDS
source benchmarks/device_env.sh
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 common compiler pod scheduler schemas benchmarks > /dev/null
(cd .gpu-old && python3 -m compileall -q -j 0 common compiler pod scheduler schemas benchmarks > /dev/null)
cold() { local tree=$1 name=$2
  (cd $tree && timeout 80 python3 benchmarks/script_vs_job.py --device gpu --case matmul --n 8192 --rounds 3 \
     --running-pods --no-local --cold --out $OUT/$name.json > $OUT/$name.log 2>&1)
  echo "$name rc=$? at $((SECONDS-T0))s" >> $OUT/run.log; }
cold .gpu-old cold-old-1
cold . cold-main-1
cold .gpu-old cold-old-2
cold . cold-main-2
cd $OUT && tar czf results.tgz --exclude=results.tgz --exclude=run.log * && find . -maxdepth 1 -type f ! -name results.tgz ! -name run.log -delete
