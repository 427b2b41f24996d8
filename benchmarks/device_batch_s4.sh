#!/bin/bash
# The third device call of 2026-12-07's fifth session (from the repo root on a 1x H100, wheels in .whl):
# 1. where bf16 matmul's first call spends its time (issue 36: <= 8 s at 8192^3, <= 15 s at 16384^3):
#    first_call.py with every progress line stamped with its time since the start, then the 8192^3
#    first call again under cProfile (the parent's time: compiles in worker processes show as waits)
# 2. the seed's SGEMM row of issue 36's table at the defaults (wide register blocks now searched)
source benchmarks/device_env.sh
mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt 2>&1
timeout ${FIRST_TIMEOUT:-150} python3 benchmarks/first_call.py --sizes 8192 16384 --out $OUT/first-call.json 2>&1 \
  | stamp > $OUT/first-call.log; echo "rc $?" >> $OUT/first-call.log
tail -n 4 $OUT/first-call.log
timeout ${PROF_TIMEOUT:-90} python3 -m cProfile -o $OUT/first-8192.prof benchmarks/first_call.py --sizes 8192 \
  --out $OUT/first-call-prof.json > $OUT/first-prof.log 2>&1; echo "rc $?" >> $OUT/first-prof.log
python3 -c "import pstats; pstats.Stats('$OUT/first-8192.prof').sort_stats('cumulative').print_stats(45)" \
  > $OUT/first-8192-cumulative.txt 2>&1
python3 -c "import pstats; pstats.Stats('$OUT/first-8192.prof').sort_stats('tottime').print_stats(30)" \
  > $OUT/first-8192-tottime.txt 2>&1
PHOBOS_ISSUE36_OUT=$OUT timeout ${ROWS_TIMEOUT:-120} python3 -m pytest benchmarks/test_issue36_table.py \
  -p no:cacheprovider -q -rs -k "seed" > $OUT/issue36.log 2>&1; echo "rc $?" >> $OUT/issue36.log
cat $OUT/issue36-*.md 2>/dev/null | tail -4
