#!/bin/bash
# One device call for the novel-kernel corpus (tests/cuda/novel, issue: robustness on kernels the
# examples do not cover): tests/cuda/test_novel_gpu.py (every corpus kernel on the GPU against the
# interpreter at ragged sizes, with the exact count of points that ran), then, in the time left,
# the coordinator's novel.py --gpu (its kernels tuned at 1000-sized problems, the GPU against the
# interpreter) from the folder NOVEL (default novel_s5). Everything goes under $OUT. BUDGET
# (seconds, default 190) bounds the call. Run from the repo root on the GPU machine with the
# structlog/pycapnp/ml_dtypes wheels in WHL.
set -o pipefail
start=$SECONDS
left() { echo $(( ${BUDGET:-190} - (SECONDS - start) )); }
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1 | tee $OUT/gpu.log
echo "+ python3 -m pytest tests/cuda/test_novel_gpu.py -q" > $OUT/gpu_tests.log
timeout ${TEST_TIMEOUT:-110} python3 -m pytest tests/cuda/test_novel_gpu.py -q -p no:cacheprovider -rs \
  --durations=8 2>&1 | tee -a $OUT/gpu_tests.log | tail -30
novel=${NOVEL:-novel_s5}
if [ -f "$novel/novel.py" ] && [ "$(left)" -gt 15 ]; then
  echo "+ python3 $novel/novel.py $novel --gpu ($(left) s left)" > $OUT/novel.log
  timeout "$(left)" python3 "$novel/novel.py" "$novel" --gpu 2>&1 | tee -a $OUT/novel.log | tail -20
fi
