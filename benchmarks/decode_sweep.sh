#!/bin/bash
# Issue 33's variants sweep: which way of compiling the split decode reads the KV fastest, so that
# the default can follow the measurement. Run from the repo root on the GPU machine with the
# structlog/pycapnp/ml_dtypes wheels in WHL (default .whl); files under $OUT (default /tmp/decode-sweep),
# every stage's log appended to sweep.log:
#   sweep.md/json    VARIANTS over SWEEP_G (16,32,1), bf16 KV, S = SWEEP_LOG2S (2^16, 2^20, 2^22)
#   g32.md/json      G32_VARIANTS over G = 32, bf16 KV, the same S (unset: not run)
#   f32.md/json      F32_VARIANTS over G = 16, f32 KV, S = 2^20 (F32_TIMEOUT=0: not run)
#   default.md/json  DEFAULT_VARIANTS over G = 1, 8, 16, 32, bf16 and f32, S = 2^20 (DEFAULT_TIMEOUT=0: not run)
# A variant (benchmarks/decode.py, Variant): fan<N> the merge tree's fan-in (PHOBOS_SPLIT_FAN_IN, 0: no
# tree), @<K>sm K chunks per SM forced (else the cost model's: one per SM, mainloops/split_loop/plan.py
# CTAS_PER_SM), +pad16 BG >= 16 rows for bf16, +bg<N> BG <= N rows (G / N CTAs along x), and the partial's
# schedule (PHOBOS_SPLIT_SCHEDULE): +st<N> cp.async ring stages, +t<N> threads, +db the CUDA-core
# dots' double buffer, +late copies issued after the dots.
# Each markdown ends with one line per variant: mean and worst fraction of the copy bandwidth and
# the geometric mean of the time against the Triton split-KV kernel's; the first variant is the
# default. Defaults to change after reading it: common/options.py split_fan_in (fan), plan.py
# CTAS_PER_SM (@Ksm), DEFAULT_VARIANTS in benchmarks/decode.py (+pad16), launch.py partial_schedule.
set -o pipefail
OUT=${OUT:-/tmp/decode-sweep}
mkdir -p $OUT
source "$(dirname "$0")/device_env.sh"
VARIANTS=${VARIANTS:-fan8+pad16,fan8+pad16+one,fan8+pad16+st4,fan8@2sm+pad16+st2,fan8+pad16+bg16}
F32_VARIANTS=${F32_VARIANTS:-fan8,fan8+one,fan8+db,fan8@2sm+t128}
timeout ${SWEEP_TIMEOUT:-95} python3 benchmarks/decode.py --out $OUT/sweep --g ${SWEEP_G:-16,32,1} \
  --log2s ${SWEEP_LOG2S:-16,20,22} --dtypes bf16 --variants $VARIANTS --bs 64 --quick --no-splitk --no-sdpa \
  2>&1 | tee -a $OUT/sweep.log | grep -v '^{' | tail -60
if [ -n "${G32_VARIANTS:-}" ]; then
  timeout ${G32_TIMEOUT:-40} python3 benchmarks/decode.py --out $OUT/g32 --g 32 --log2s ${SWEEP_LOG2S:-16,20,22} \
    --dtypes bf16 --variants $G32_VARIANTS --bs 64 --quick --no-splitk --no-sdpa 2>&1 | tee -a $OUT/sweep.log \
    | grep -v '^{' | tail -30
fi
if [ "${F32_TIMEOUT:-30}" != 0 ]; then
  timeout ${F32_TIMEOUT:-30} python3 benchmarks/decode.py --out $OUT/f32 --g 16 --log2s 20 --dtypes f32 \
    --variants $F32_VARIANTS --bs 64 --quick --no-splitk --no-sdpa 2>&1 | tee -a $OUT/sweep.log | grep -v '^{' | tail -12
fi
if [ "${DEFAULT_TIMEOUT:-55}" != 0 ]; then
  timeout ${DEFAULT_TIMEOUT:-55} python3 benchmarks/decode.py --out $OUT/default --g 1,8,16,32 --log2s 20 \
    --dtypes bf16,f32 --variants ${DEFAULT_VARIANTS:-fan8+pad16} --bs 64 --quick --no-splitk --no-sdpa 2>&1 \
    | tee -a $OUT/sweep.log | grep -v '^{' | tail -20
fi
