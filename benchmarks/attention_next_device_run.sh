#!/bin/bash
# One device call for the bf16/f16 attention leaves of BR = 256 and ping-pong (issue 14, D = 128;
# once patches/attention-unverified, on main since session 4): their GPU tests against the
# interpreter (BR = 256 on four warpgroups and on mma.sync, at ragged shapes; the two ping-pong
# schedules at every attention point), then benchmarks/leaf_tc_bench.py --only attention (tuned
# at each N, anchors in the same run), with
# the clocks and power once a second in dmon.log. Everything goes under $OUT
# (unverified_device_run.sh, which also takes PATCHES, TEST_ARGS, TESTS=0 and BENCH_ARGS).
# The default tests are those 23, about 3 minutes; TEST_ARGS="-k attention" runs
# every attention test. BENCH_ARGS narrows the benchmark (e.g. --only attention_full, or
# attention_causal, to keep one call within 600 s).
NEW_TESTS="attention_at_256_rows or (attention_on_tensor_cores and (phk-5 or phk-6))" ONLY=attention \
  exec bash "$(dirname "$0")/unverified_device_run.sh"
