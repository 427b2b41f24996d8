#!/bin/bash
# session 11 call 1: diagnosis of the one-tile IPC fetch
R=$PWD
source benchmarks/device_env.sh
unset PYTHONDONTWRITEBYTECODE
{ cat /sys/devices/system/clocksource/clocksource0/current_clocksource; nproc; lscpu | grep -E "Model name|MHz|Hypervisor"; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } > $OUT/machine.txt 2>&1
python3 -m compileall -q -j 0 common compiler pod scheduler schemas phobos benchmarks tests .gpu-instr > /dev/null
timeout 120 python3 benchmarks/ipc_copy_floor.py --rounds 200 > $OUT/floor.txt 2>&1
rm -f /tmp/marks-*.txt
(cd .gpu-instr && PYTHONPATH=/tmp/site:$R/.gpu-instr PHOBOS_TRANSFER_ROUNDS=30 timeout 150 python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py -k "gpu-pods" --benchmark-only -s) > $OUT/instr.log 2>&1
cat /tmp/marks-*.txt > $OUT/marks.txt; ls -la /tmp/marks-* >> $OUT/instr.log
PHOBOS_TRANSFER_ROUNDS=30 timeout 100 python3 -m pytest -q -p no:cacheprovider benchmarks/test_pod_transfer.py -k "gpu-pods" --benchmark-only -s > $OUT/main.log 2>&1
grep -E "16 MiB|in flight" $OUT/*.log; cat $OUT/floor.txt $OUT/machine.txt
