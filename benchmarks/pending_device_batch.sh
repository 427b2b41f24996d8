#!/bin/bash
# The device batch the third session of 2026-12-07 could not run (no GPU machine started); it ran
# as the fourth session's first call (results: benchmarks/results/h100-2026-12-07-s3/call1).
# Each block is the measurement a change of this session waits for (issue in brackets); run from the
# repo root on a 1x H100 with the wheels in .whl: `CAP=65 bash benchmarks/pending_device_batch.sh`.
# Files land under $OUT/<block>/, and $OUT/all.tar.gz holds them all (the device returns 8 files).
# Correctness first: every block starts with the GPU tests of its change, before any timing.
ALL=$OUT; mkdir -p $ALL/res
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $ALL/res/device.txt 2>&1

block_main() {  # last session's fixes that never ran on a GPU, and the 2-pod cluster decode
  source benchmarks/device_env.sh
  timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/cuda/test_tma_store_gpu.py \
    tests/cuda/test_split_loop_gpu.py tests/cuda/test_tuner_gpu.py > $OUT/gpu-tests.log 2>&1
  timeout 45 python3 -m pytest -m gpu -q -p no:cacheprovider -rfs tests/runtime/test_cluster_decode.py \
    > $OUT/cluster-decode.log 2>&1
}

block_attn() {
  source benchmarks/device_env.sh
  # 1. correctness first (7 cases): chained max/min folds bit for bit against the interpreter (NaN
  #    rows, infinities, i32); causal GQA at odd N, D=64 and 128, on the two TMA schedules in both
  #    CTA orders
  timeout 35 python3 -m pytest -p no:cacheprovider -q -m gpu tests/cuda/test_chained_folds_gpu.py \
    "tests/cuda/test_causal_order_gpu.py::test_causal_gqa_equals_interpreter_in_both_orders[0-row]" \
    "tests/cuda/test_causal_order_gpu.py::test_causal_gqa_equals_interpreter_in_both_orders[0-grouped]" \
    "tests/cuda/test_causal_order_gpu.py::test_causal_gqa_equals_interpreter_in_both_orders[1-row]" \
    "tests/cuda/test_causal_order_gpu.py::test_causal_gqa_equals_interpreter_in_both_orders[1-grouped]" \
    2>&1 | tail -20 > $OUT/gpu-tests.log
  # 2. the three attention rows at fixed candidates against cuDNN SDPA (same process, alternated
  #    rounds, each output checked against SDPA first); writes $OUT/attention-variants.{md,json}
  timeout 35 python3 benchmarks/attention_variants.py --out $OUT/attention-variants 2>&1 | tail -45
}

block_fp8() {
  source benchmarks/device_env.sh
  V=128x128x128@t0-wm0-s6-row-wgmma-tma,128x128x256@t0-wm0-s3-grouped8-wgmma-tma
  V=$V,128x128x256@t0-wm0-s3-row-wgmma-tma,128x128x256@t0-wm0-s3-grouped8-wgmma-tma-tmast
  V=$V,128x256x128@t0-wm0-s4-grouped8-wgmma-tma-fp8ov
  timeout 40 python3 benchmarks/fp8_bench.py --forms rowwise --sizes 4096,8192,16384 --variants "$V" \
    --out $OUT/fp8-variants.md --json $OUT/fp8-variants.json > $OUT/fp8-bench.log 2>&1
  echo "rc $?" >> $OUT/fp8-bench.log
  timeout 25 python3 -m pytest -m gpu tests/cuda/test_fp8_gpu.py -q -p no:cacheprovider -rf \
    -k "point6- or point13 or point14 or k256 or past_k or accumulation[tma]" > $OUT/fp8-gpu-tests.log 2>&1
  echo "rc $?" >> $OUT/fp8-gpu-tests.log
}

block_decode() {
  source benchmarks/device_env.sh
  timeout 65 python3 benchmarks/decode.py --out $OUT/decode --g 16,32,1 --log2s 16,20 --dtypes bf16 \
    --variants fan8+pad16,fan8+pad16+one,fan8+pad16+st4,fan8@2sm+pad16+st2,fan8+pad16+bg16 \
    --bs 64 --quickest --no-splitk --no-sdpa > $OUT/decode.log 2>&1; grep -v '^{' $OUT/decode.log | tail -45
}

block_tuner() {
  source benchmarks/device_env.sh
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/logs.txt 2>&1
  # 1. the driver's JIT of 8 warpgroup-MMA candidates: serial, on 16 threads, one process each then read back from its cache
  timeout 15 python3 benchmarks/jit_load.py --kernels 8 --out $OUT/jit-load.json >> $OUT/logs.txt 2>&1
  # 2. two rows with this branch's default tuner (threaded loads, family cut), cold cache each
  PHOBOS_ISSUE36_OUT=$OUT timeout 50 python3 -m pytest benchmarks/test_issue36_table.py -p no:cacheprovider -q -rs \
    -k "matmul and bf16 and (8192 or 16384)" >> $OUT/logs.txt 2>&1
  # 3. the same rows with the timing cut on: same winners (phobos_ms), shorter first call?
  PHOBOS_TUNE_CUT=1 PHOBOS_ISSUE36_OUT=$OUT/cut timeout 50 python3 -m pytest benchmarks/test_issue36_table.py \
    -p no:cacheprovider -q -rs -k "matmul and bf16 and (8192 or 16384)" >> $OUT/logs.txt 2>&1
  rm -f $OUT/cut/*.md
}

block_persist() {
  source benchmarks/device_env.sh
  # 1. GPU correctness of the persistent ring against the interpreter (12 cases: ragged M/N/K, tiles = kP+1,
  #    P+1, whole waves, bias+ReLU, f32/bf16/f16 out, one and two consumer warpgroups, batched; plain and TMA store)
  timeout 30 python3 -m pytest -q -m gpu tests/cuda/test_persistent_gpu.py -p no:cacheprovider \
    > $OUT/persist-gpu-tests.log 2>&1; echo "tests rc=$?" >> $OUT/persist-gpu-tests.log
  # 2. one process, forced schedules at 128x256: linear+bias+ReLU 8192^3, bf16 matmul 4096^3, 8192^3; the
  #    one-CTA-per-tile TMA ring (the current best family) vs the persistent ring (132 CTAs), each with and
  #    without the TMA store, vs torch (addmm+relu / cuBLAS matmul), alternated rounds (rows print as they finish)
  timeout 40 python3 benchmarks/persist_bench.py --quick --out $OUT/persist-bench.md > $OUT/persist-bench.log 2>&1
  echo "bench rc=$?" >> $OUT/persist-bench.log
  # 3. the tuner with the persistent ring in its search (PHOBOS_CUDA_PERSISTENT=1), issue 36's fused row:
  #    which schedule it picks (tune lines in the .json) and the ratio to torch's unfused pair
  PHOBOS_CUDA_PERSISTENT=1 PHOBOS_ISSUE36_OUT=$OUT timeout 45 python3 -m pytest -q -p no:cacheprovider \
    benchmarks/test_issue36_table.py -k "linear and 8192" --benchmark-disable > $OUT/persist-tuner.log 2>&1
  echo "tuner rc=$?" >> $OUT/persist-tuner.log
}

block_sgemm() {
  source benchmarks/device_env.sh
  # 1. f32 matmul 8192^3, forced candidates against cuBLAS SGEMM in one process, alternated:
  #    8x8 per thread (main's schedules) vs the new 16x8 (t128) and 8x16 (128x256 / 256x128 on 256)
  timeout 30 python3 benchmarks/sgemm_variants.py --variants \
    128x128x8:t256-db,128x128x16:t256-db,128x128x8:t128-db,128x128x16:t128-db,128x256x8:t256-db,256x128x8:t256-db \
    > $OUT/sgemm-variants.md 2> $OUT/sgemm-variants.err
  # 2. the new CUDA-core schedules against the interpreter (matmul kernels; the tests set
  #    PHOBOS_CUDA_WIDE_BLOCKS=1 themselves, as sgemm_variants.py does)
  timeout 20 python3 -m pytest -q -m gpu -p no:cacheprovider tests/cuda/test_cuda_gpu.py \
    -k "(wide and matmul) or 8_by_16" > $OUT/sgemm-gpu-tests.log 2>&1
}

for n in ${BLOCKS:-main attn fp8 decode tuner persist sgemm}; do
  mkdir -p $ALL/res/$n
  ( export OUT=$ALL/res/$n; timeout ${CAP:-70} bash -c "$(declare -f block_$n); block_$n" > $ALL/res/$n/block.log 2>&1
    echo "rc $?" >> $ALL/res/$n/block.log )
  tar czf $ALL/all.tar.gz -C $ALL/res .
done
grep -h "passed\|failed\|rc \|WRONG" $ALL/res/*/*.log | tail -40
