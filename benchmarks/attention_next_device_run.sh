#!/bin/bash
# One device call for the bf16/f16 attention leaves after patches/attention-unverified (issue 14,
# D = 128): the GPU tests the patches add, against the interpreter (BR = 256 on four warpgroups
# and on mma.sync, at ragged shapes; the two ping-pong schedules at every attention point), then
# benchmarks/leaf_tc_bench.py --only attention (tuned at N = 16384, anchors in the same run), with
# the clocks and power once a second in dmon.log. Everything goes under $OUT
# (unverified_device_run.sh, which also takes PATCHES, TEST_ARGS, TESTS=0 and BENCH_ARGS).
# The default tests are the 23 the patches add, about 3 minutes; TEST_ARGS="-k attention" runs
# every attention test. BENCH_ARGS narrows the benchmark (e.g. --only attention_full, or
# attention_causal, to keep one call within 600 s).
NEW_TESTS="attention_at_256_rows or (attention_on_tensor_cores and (phk-5 or phk-6))" ONLY=attention \
  exec bash "$(dirname "$0")/unverified_device_run.sh"
