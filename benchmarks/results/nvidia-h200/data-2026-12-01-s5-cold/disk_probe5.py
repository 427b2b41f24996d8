"""Session 5's disk probe for the cold row (run from the repository root, PYTHONPATH=.):

1. the block queue's settings (read-ahead, request size, scheduler);
2. an 8192^2 f32 output (256 MiB) written as the cold job writes it: four 4096^2 tiles, each a
   run of 16 KiB per row 32 KiB apart, in 8 MiB pieces, two tiles at a time from two threads;
   the write-back started per piece on the piece's span (the code before session 5) or per
   8 MiB chunk once both tiles have filled it (pod/storage/disk_order.py's WriteBack); then fsync.
   Cold, twice each, alternating; seconds from the first write to the fsync's end;
3. the steps of a commit after such a write, over an old 256 MiB output as in the benchmark:
   fsync of the staging copy, the durable record, folder fsyncs, rename, record removal
   (common/commit.py), each timed; every other time with the old output held open across the
   rename, so that its blocks are freed when it is closed after the commit (the filesystem is
   mounted with `discard`), to see what freeing them costs inside the commit.
"""

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from common import fileio, storage
from common.atomic import write_atomically
from pod.storage.disk_order import WriteBack
from schemas.instructions import Region

N, T, PIECE_ROWS = 8192, 4096, 512
out = {}
for name in ("read_ahead_kb", "max_sectors_kb", "nr_requests", "scheduler", "rotational", "write_cache"):
    try:
        out[name] = Path(f"/sys/block/vda/queue/{name}").read_text().strip()
    except OSError as err:
        out[name] = str(err)
root = Path(tempfile.mkdtemp(prefix="disk-probe5-", dir=sys.argv[1] if len(sys.argv) > 1 else None))
final = root / "c.npy"
lay = storage.Layout(128, (N, N), 4)
tiles = [(0, 0), (0, T), (T, 0), (T, T)]
values = np.random.default_rng(0).standard_normal((PIECE_ROWS, T), dtype=np.float32)


def write_tiles(staging: Path, chunked: bool) -> None:
    tracker = WriteBack([(staging, *_rel(Region(0, t, (T, T)))) for t in tiles]) if chunked else None

    def store(tile):
        for first in range(0, T, PIECE_ROWS):
            piece = Region(0, (tile[0] + first, tile[1]), (PIECE_ROWS, T))
            storage.write_region(staging, piece, values, writeback=not chunked)
            if chunked:
                ranges = tracker.add(staging, *_rel(piece))
                fd = os.open(staging, os.O_RDONLY)
                for a, b in ranges:
                    fileio.start_writeback(fd, 128 + a, b - a)
                os.close(fd)

    for pair in (tiles[:2], tiles[2:]):
        threads = [threading.Thread(target=store, args=(t,)) for t in pair]
        [x.start() for x in threads]
        [x.join() for x in threads]


def _rel(region):
    starts, run = storage.byte_runs(lay, region)
    return starts - 128, run


def commit_steps(staging: Path, hold_old: bool) -> dict:
    steps = {}
    old = os.open(final, os.O_RDONLY) if hold_old else None
    t = time.perf_counter()
    fileio.fsync_path(staging)
    steps["fsync_staging"] = time.perf_counter() - t
    record = root / ".c.npy.phobos-commit-probe"
    t = time.perf_counter()
    write_atomically(record, "{}", durable=True)
    steps["record_durable"] = time.perf_counter() - t
    t = time.perf_counter()
    fileio.fsync_path(root)
    steps["fsync_folder_1"] = time.perf_counter() - t
    t = time.perf_counter()
    os.replace(staging, final)
    fileio.fsync_path(root)
    steps["rename_and_fsync_folder"] = time.perf_counter() - t
    t = time.perf_counter()
    record.unlink()
    fileio.fsync_path(root)
    steps["unlink_record_and_fsync_folder"] = time.perf_counter() - t
    if old is not None:
        t = time.perf_counter()
        os.close(old)
        fileio.fsync_path(root)
        steps["old_closed_and_fsync_folder"] = time.perf_counter() - t
    return {k: round(v, 4) for k, v in steps.items()}


with open(final, "wb") as f:  # the old output
    np.save(f, np.zeros((N, N), np.float32))
    os.fsync(f.fileno())
for i, (chunked, hold_old) in enumerate([(False, False), (True, True), (False, True), (True, False)]):
    staging = storage.create_staging(final, (N, N), "f32", f"probe{i}")
    t = time.perf_counter()
    write_tiles(staging, chunked)
    written = time.perf_counter() - t
    steps = commit_steps(staging, hold_old)
    out.setdefault("per_piece" if not chunked else "chunked", []).append(
        {"writes_s": round(written, 4), "to_fsync_end_s": round(written + steps["fsync_staging"], 4),
         **steps})
    fd = os.open(final, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
final.unlink()
root.rmdir()
print(json.dumps(out, indent=1))
