#!/bin/bash
# One device call for split-KV decode on an H200 (issue 17): 2 pods sharing the GPU run
# examples/decode_gqa.phk (f32; the bf16 step leaf does not lay out on tensor cores at G = 8) over
# S = 2^20 and 2^22 keys, unsplit, split over the 2 pods, and split into 8 shares (each pod runs 4
# shares' chains at once, one per compute stream), with torch SDPA on the whole problem in the same
# run (benchmarks/split_bench.py). Logs, JSON and the table under $OUT. Run from the repo root on
# the GPU machine with the structlog/pycapnp/ml_dtypes wheels in WHL (default .whl).
set -o pipefail
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee $OUT/split.log
timeout ${BENCH_TIMEOUT:-170} python3 benchmarks/split_bench.py --cases ${CASES:-decode:20,decode:22} --pods 2 \
  --reps ${REPS:-2} --extra-shares 8 --sdpa --data /tmp --out $OUT/split-h200.json --markdown $OUT/split-h200.md \
  2>&1 | tee -a $OUT/split.log
