#!/usr/bin/env bash
# The Slurm integration end to end (docs/slurm.md): on a real single-host Slurm (tools/slurm_local.sh),
# `srun -n 2 phobos-sched slurm` runs the split-K matmul example (its K loop split over 2 shares)
# on two CPU pods, one per task, found from Slurm's environment, and checks C against numpy.
#
#   tools/slurm_split_k.sh            (from any folder; .ci/run runs it)
#
# The inputs are multiples of 1/8 in [-1, 1): every partial sum is exact in f32, so the split job
# must equal numpy's product whatever the order of the additions. Exit 0 only when it does.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
python=${PHOBOS_PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d /tmp/phobos-slurm-job.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PHOBOS_CACHE_DIR="$work/cache"

"$python" - "$work" <<'PY'
import sys
import numpy as np
work = sys.argv[1]
rng = np.random.default_rng(38)
m, n, k = 256, 256, 16384
a = (np.floor(rng.uniform(-8, 8, (m, k))) / 8).astype(np.float32)
b = (np.floor(rng.uniform(-8, 8, (k, n))) / 8).astype(np.float32)
np.save(f"{work}/A.npy", a)
np.save(f"{work}/B.npy", b)
np.save(f"{work}/C.npy", np.zeros((m, n), np.float32))
np.save(f"{work}/C_expected.npy", (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32))
PY
"$python" -c 'import secrets; print(secrets.token_urlsafe(32))' >"$work/token"
chmod 600 "$work/token"
"$python" -m scheduler.cli new-job "$root/examples/jobs/matmul_split_k.phk" \
  --dim M=256 --dim N=256 --dim K=16384 --cluster TILE_K=4096 \
  --scalar alpha=1 --scalar beta=0 --split 2 --tree binary \
  --tensor A=file:A.npy --tensor B=file:B.npy --tensor C=file:C.npy -o "$work/split_k.job" >/dev/null

cd "$work"
# --kill-on-bad-exit: a task that fails ends the step at once (no pod waits for its timeout);
# timeout: a hung step fails the check instead of CI's whole run.
timeout 300 "$root/tools/slurm_local.sh" srun -n 2 --kill-on-bad-exit=1 --time=5 \
  "$python" -m scheduler.cli slurm split_k.job --token-file "$work/token" --hello-timeout 60 \
  --expect C=C_expected.npy
echo "slurm_split_k: 2 Slurm tasks ran the split-K job and C matches numpy"
