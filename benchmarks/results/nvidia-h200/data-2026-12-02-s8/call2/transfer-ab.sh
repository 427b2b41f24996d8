#!/bin/bash
# transfer A/B: HEAD tree (.) against b6f94cf (.gpu-old), alternated twice
source benchmarks/device_env.sh
unset PYTHONDONTWRITEBYTECODE
for t in . .gpu-old . .gpu-old; do
  name=$( [ "$t" = . ] && echo head || echo old )
  ( cd $t && python3 -m compileall -q -j 0 common compiler pod scheduler schemas benchmarks tests >/dev/null
    PYTHONPATH=/tmp/site:. timeout 60 python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py -k "tile_transfer and gpu" --benchmark-only -s 2>&1 | grep "16 MiB tile" ) | sed "s/^/$name: /" | tee -a $OUT/transfer-ab.txt
done
