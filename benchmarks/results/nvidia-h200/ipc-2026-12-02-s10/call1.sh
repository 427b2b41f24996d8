#!/bin/bash
# Device call 1 of ipc10 (session 10): the one-tile IPC figure for main as it was (181296b) and
# for variants, alternated, in one run; then the data path's GPU tests on the branch.
# Run from main's tree on the device with the branch's tree in .gpu-ipc10 (carry [".gpu-ipc10"]):
#   bash .gpu-ipc10/benchmarks/results/nvidia-h200/ipc-2026-12-02-s10/call1.sh
# Variants (each a copy under /tmp):
#   main       main as it was: the benchmark keeps every round's job on the pods
#   serial     main, but a plan starts only once its leaves are prepared (before c419ee4)
#   mainbench  main with the branch's benchmark (each round's job dropped on both pods)
#   branch     the branch: mappings kept across jobs, prepared leaves kept by content
#   nocache    the branch without the prepared-leaf cache (lru_cache maxsize 0)
R=$PWD B=$PWD/.gpu-ipc10
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $B/.whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
unset PYTHONDONTWRITEBYTECODE
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nproc; git -C $R log --oneline -1; } > $OUT/machine.txt 2>&1
mk() {  # mk NAME FROM: a copy of tree FROM at /tmp/NAME, without device copies and results
  rm -rf /tmp/$1 && mkdir -p /tmp/$1
  (cd $2 && tar cf - --exclude='./.gpu*' --exclude=./benchmarks/results --exclude=./.whl .) | tar xf - -C /tmp/$1
}
mk main $R
mk serial $R
sed -i 's/^        if job.writes is None:  # what the leaves write, from their source$/        if True:  # EXPERIMENT: the plan waits for its leaves/' /tmp/serial/pod/runtime.py
mk mainbench $R
cp $B/benchmarks/test_pod_transfer.py /tmp/mainbench/benchmarks/
mk branch $B
mk nocache $B
sed -i 's/functools.lru_cache(maxsize=KEPT_LEAVES)(self._prepared)/functools.lru_cache(maxsize=0)(self._prepared)/' /tmp/nocache/pod/backend_gpu.py
echo "patched: serial $(grep -c EXPERIMENT /tmp/serial/pod/runtime.py) nocache $(grep -c 'maxsize=0' /tmp/nocache/pod/backend_gpu.py)" | tee $OUT/variants.txt
for v in main serial mainbench branch nocache; do (cd /tmp/$v && python3 -m compileall -q -j 0 common compiler pod scheduler schemas phobos benchmarks tests > /dev/null); done
tr() {  # tr VARIANT TAG -k-EXPRESSION
  echo "== $1 $2" | tee -a $OUT/transfer-summary.txt
  (cd /tmp/$1 && PYTHONPATH=/tmp/site:/tmp/$1 timeout 100 python3 -m pytest -q -p no:cacheprovider \
    benchmarks/test_pod_transfer.py -k "$3" --benchmark-only -s --benchmark-json=$OUT/$1-$2.json) > $OUT/$1-$2.log 2>&1
  grep -E "16 MiB tile|in flight|passed|failed|rror" $OUT/$1-$2.log | tee -a $OUT/transfer-summary.txt
}
ONE="tile_transfer_16mib and gpu-pods"
tr main 1 "gpu-pods"
tr branch 1 "gpu-pods"
tr serial 1 "$ONE"
tr mainbench 1 "$ONE"
tr nocache 1 "$ONE"
tr main 2 "$ONE"
tr branch 2 "gpu-pods"
echo "== branch GPU tests (data path)" | tee -a $OUT/transfer-summary.txt
(cd /tmp/branch && PYTHONPATH=/tmp/site:/tmp/branch timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/pod/test_backend_gpu.py tests/pod/test_ipc_mappings.py tests/runtime/test_gpu.py) > $OUT/branch-gpu-tests.log 2>&1
tail -3 $OUT/branch-gpu-tests.log | tee -a $OUT/transfer-summary.txt
