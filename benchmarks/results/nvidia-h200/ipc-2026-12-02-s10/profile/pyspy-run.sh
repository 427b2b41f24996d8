#!/bin/bash
# py-spy over the one-tile GPU transfer benchmark: which threads of the pods are on a CPU
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:.
source benchmarks/device_env.sh
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 common compiler pod scheduler schemas phobos benchmarks tests > /dev/null
PHOBOS_TRANSFER_ROUNDS=150 timeout 200 .gpu-spy/py-spy record --subprocesses --threads --rate 2000 --format raw \
  -o $OUT/spy.raw -- python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py \
  -k "tile_transfer and gpu-pods" --benchmark-only -s > $OUT/t.log 2>&1
echo "rc $?"
grep -E "16 MiB" $OUT/t.log
ls -la $OUT
python3 .gpu-spy/agg.py $OUT/spy.raw > $OUT/spy-summary.txt
gzip -9 $OUT/spy.raw
ls -la $OUT
head -60 $OUT/spy-summary.txt
