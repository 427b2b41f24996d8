#!/bin/bash
# Issue 33's variants sweep (about 150 s on an H100): which way of compiling the split decode
# reads the KV fastest, so that the default can follow the measurement. Run from the repo root on
# the GPU machine with the structlog/pycapnp/ml_dtypes wheels in WHL (default .whl); files under
# $OUT (default /tmp/decode-sweep): sweep.md/json (the variants over G = 16 and 1, bf16 KV, S = 2^16,
# 2^20, 2^22) and default.md/json (the default variant and one chunk per SM over G = 1, 8, 16, 32,
# bf16 and f32, S = 2^20: f32 partials and bf16 G = 32 fit one CTA per SM, registers or shared memory).
# A variant (benchmarks/decode.py, Variant): fan<N> the merge tree's fan-in (PHOBOS_SPLIT_FAN_IN,
# 0: no tree), @<K>sm K chunks per SM forced (else the cost model's), +pad16 BG >= 16 rows for bf16.
# Each markdown ends with one line per variant: mean and worst fraction of the copy bandwidth and
# the geometric mean of the time against the Triton split-KV kernel's; the first variant is the
# default. Defaults to change after reading it: common/options.py split_fan_in (fan), mainloops/split_loop/plan.py
# CTAS_PER_SM (@Ksm, owned by 'decode'), DEFAULT_VARIANTS in benchmarks/decode.py (+pad16).
set -o pipefail
OUT=${OUT:-/tmp/decode-sweep}
mkdir -p $OUT
source "$(dirname "$0")/device_env.sh"
VARIANTS=${VARIANTS:-fan8+pad16,fan0+pad16,fan4+pad16,fan16+pad16,fan8@1sm+pad16,fan8@4sm+pad16,fan8}
timeout ${SWEEP_TIMEOUT:-95} python3 benchmarks/decode.py --out $OUT/sweep --g 16,1 --log2s 16,20,22 \
  --dtypes bf16 --variants $VARIANTS --bs 64 --quick --no-splitk --no-sdpa 2>&1 | tee $OUT/sweep.log \
  | grep -v '^{' | tail -40
timeout ${DEFAULT_TIMEOUT:-55} python3 benchmarks/decode.py --out $OUT/default --g 1,8,16,32 --log2s 20 \
  --dtypes bf16,f32 --variants ${DEFAULT_VARIANTS:-fan8+pad16,fan8@1sm+pad16} --bs 64 --quick --no-splitk --no-sdpa 2>&1 \
  | tee $OUT/default.log | grep -v '^{' | tail -20
