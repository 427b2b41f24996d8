"""Can the disk under /tmp take a 256 MiB output faster than page-cache write + fsync? O_DIRECT
writes in large aligned pieces, 1 and 4 writers; and 768 MiB of cold reads beside each."""

import json
import mmap
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

MiB = 1 << 20
root = Path(tempfile.mkdtemp(prefix="disk-wprobe-"))


def drop(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def seq_read(paths, chunk=8 * MiB):
    buf = mmap.mmap(-1, chunk)
    n = 0
    t = time.perf_counter()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        while True:
            k = os.readv(fd, [buf])
            n += k
            if k == 0:
                break
        os.close(fd)
    return n / (time.perf_counter() - t)


def write(path, nbytes, writers=1, direct=False, chunk=16 * MiB):
    buf = mmap.mmap(-1, chunk)
    buf.write(np.random.default_rng(1).integers(0, 255, chunk, np.uint8).tobytes())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o644)
    offs = list(range(0, nbytes, chunk))
    lock = threading.Lock()

    def w():
        while True:
            with lock:
                if not offs:
                    return
                off = offs.pop(0)
            os.pwritev(fd, [buf], off)

    t = time.perf_counter()
    ts = [threading.Thread(target=w) for _ in range(writers)]
    [x.start() for x in ts]
    [x.join() for x in ts]
    os.fsync(fd)
    os.close(fd)
    return nbytes / (time.perf_counter() - t)


ins = [root / f"{c}.bin" for c in "abc"]
for p in ins:
    np.random.default_rng(0).standard_normal(64 * MiB, dtype=np.float32).tofile(p)
out = root / "out.bin"
res = {}
for name, kw in [
    ("buffered_1", {}),
    ("buffered_4", {"writers": 4}),
    ("direct_1", {"direct": True}),
    ("direct_4", {"direct": True, "writers": 4}),
]:
    res[f"write256_{name}_GBps"] = round(max(write(out, 256 * MiB, **kw) for _ in range(2)) / 1e9, 3)
res["read768_seq_GBps"] = round(max((drop(ins), seq_read(ins))[1] for _ in range(2)) / 1e9, 3)
for name, kw in [("buffered_1", {}), ("direct_4", {"direct": True, "writers": 4})]:
    drop(ins)
    r = {}
    t = time.perf_counter()
    ts = [
        threading.Thread(target=lambda r=r: r.__setitem__("r", seq_read(ins))),
        threading.Thread(target=lambda r=r, kw=kw: r.__setitem__("w", write(out, 256 * MiB, **kw))),
    ]
    [x.start() for x in ts]
    [x.join() for x in ts]
    res[f"read768_with_write256_{name}_s"] = round(time.perf_counter() - t, 3)
res["read768_alone_s"] = round(768 * MiB / (res["read768_seq_GBps"] * 1e9), 3)
print(json.dumps(res, indent=1))
for p in ins + [out]:
    p.unlink()
root.rmdir()
