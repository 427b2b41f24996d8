#!/bin/bash
# session 11, final: every GPU row (data run) and the wide GPU test set, on main as it is
bash benchmarks/data_device_run.sh > /tmp/data-stdout.log 2>&1; cp /tmp/data-stdout.log $OUT/
source benchmarks/device_env.sh
unset PYTHONDONTWRITEBYTECODE
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/pod tests/runtime tests/api tests/scheduler tests/common > $OUT/gpu-tests.log 2>&1
tail -3 $OUT/gpu-tests.log
tar xzf $OUT/data-results.tgz -O data-transfer.log | grep -E "16 MiB|in flight"
tail -25 $OUT/data-run.log
