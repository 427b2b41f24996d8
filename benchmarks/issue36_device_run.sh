#!/bin/bash
# Issue 36's table on one GPU (benchmarks/test_issue36_table.py): every row against its anchor,
# first call from a cold cache and the cached call. Table (md + json) and pytest-benchmark JSON
# under $OUT; copy them to benchmarks/results/<device>/. ROWS="-k <expr>" runs some rows only
# (a device call has 10 minutes: the 16384^3 row's first call alone took 69 s before issue 36).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1 | tee $OUT/device.log
export PHOBOS_ISSUE36_OUT=$OUT
timeout ${BENCH_TIMEOUT:-560} python3 -m pytest benchmarks/test_issue36_table.py -p no:cacheprovider -q -rs \
  --benchmark-json $OUT/issue36-pytest-benchmark.json ${ROWS} 2>&1 | tee $OUT/issue36.log | tail -60
cat $OUT/issue36-*.md 2>/dev/null
