"""Summarise py-spy raw output: samples per process/thread, and each thread's top leaf frames."""
import collections
import sys

per_thread = collections.Counter()
leaves = collections.defaultdict(collections.Counter)
mids = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    stack, _, count = line.rpartition(" ")
    if not count.isdigit():
        continue
    parts = stack.split(";")
    key = ";".join(parts[:2])
    n = int(count)
    per_thread[key] += n
    leaves[key][parts[-1]] += n
    for frame in set(parts[2:]):
        mids[key][frame] += n
for key, n in per_thread.most_common(40):
    print(f"{n:8d} {key}")
    for frame, m in leaves[key].most_common(8):
        print(f"           leaf {m:7d} {frame[:160]}")
    for frame, m in mids[key].most_common(12):
        print(f"           in   {m:7d} {frame[:160]}")
