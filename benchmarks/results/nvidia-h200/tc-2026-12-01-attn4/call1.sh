#!/bin/bash
# attn4 call 1: where D=128 N=4096 full attention's time goes (probe_launch.py), then the
# benchmark row with maps and argument blocks kept by the launch path.
set -o pipefail
T0=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 PHOBOS_CACHE_DIR=/tmp/phobos-cache
F=benchmarks/results/nvidia-h200/tc-2026-12-01-attn4
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > $OUT/smi.txt 2>&1
python3 -c "import torch; print(torch.__version__, torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled())" >> $OUT/smi.txt 2>&1
timeout 100 python3 $F/probe_launch.py $OUT > $OUT/probe.log 2>&1; echo "probe rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
timeout $((270 - (SECONDS-T0))) python3 benchmarks/leaf_tc_bench.py --only attention_full --attention-d 128 --attention-sizes 4096 \
  --out $OUT/leaf-tc.json --latest $OUT/leaf-latest.json > $OUT/bench.log 2>&1; echo "bench rc=$? at $((SECONDS-T0))s" >> $OUT/run.log
