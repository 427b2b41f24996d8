"""pod/storage/disk.py on real files: the read-ahead thread reads a plan's chunks in order, a load waits
only for the chunks it needs, nothing keeps a load waiting once the read-ahead is over, and the
stores' write-back starts a whole chunk at a time."""

import errno
import os
import threading

import numpy as np
import pytest

from common import fileio, storage
from pod.storage import disk as disk_module
from pod.storage.disk import PlanDisk
from pod.storage.disk_order import read_order
from schemas.instructions import Load, NodePlan, Store
from schemas.program import Region
from tests.job_files import in_page_cache

N, T = 64, 32
CHUNK = 2048  # 8 rows of a 64 x 64 f32 matrix


def region(row, col, rows=T, cols=T):
    return Region("x", (row, col), (rows, cols))


@pytest.fixture
def files(tmp_path):
    paths = {}
    for tensor, name in enumerate("abc"):
        paths[tensor] = tmp_path / f"{name}.npy"
        np.save(paths[tensor], np.arange(N * N, dtype=np.float32).reshape(N, N) + tensor)
    return paths


def plan_of(*instructions):
    return NodePlan(node=0, generation=1, instructions=tuple(instructions), peak_bytes=0)


def load(i, tensor, row, col):
    return Load(id=i, deps=(), buffer=i, tensor=tensor, region=region(row, col))


class HeldReads:
    """os.preadv that records what the read-ahead asks for (file, offset) and holds the read of
    one chunk until `go` is set: a slow disk, whose pages are not cached (a read that must not
    wait for the disk, RWF_NOWAIT, is refused)."""

    def __init__(self, monkeypatch, path, offset):
        self.reads, self.hold = [], (str(path), offset)
        self.held, self.go = threading.Event(), threading.Event()
        real = os.preadv

        def preadv(fd, buffers, at, flags=0):
            if flags & os.RWF_NOWAIT:
                raise BlockingIOError(errno.EAGAIN, "not cached")
            read = (os.readlink(f"/proc/self/fd/{fd}"), at)
            self.reads.append(read)
            if read == self.hold:
                self.held.set()
                self.go.wait(10)
            return real(fd, buffers, at)

        monkeypatch.setattr(disk_module.os, "preadv", preadv)


def waiter(disk, path, piece):
    done = threading.Event()
    threading.Thread(target=lambda: (disk.wait(path, piece), done.set()), daemon=True).start()
    return done


def test_a_load_waits_for_its_chunks_and_only_for_them(files, monkeypatch):
    header = storage.layout(files[0]).offset
    reads = HeldReads(monkeypatch, files[1], header)  # b's first chunk is slow to come
    plan = plan_of(load(0, 0, 0, 0), load(1, 0, 0, T), load(2, 1, 0, 0), load(3, 1, T, 0))
    disk = PlanDisk.start(plan, files, "job", chunk=CHUNK)
    assert reads.held.wait(10)
    disk.wait(files[0], region(0, 0))  # a's first band
    assert waiter(disk, files[1], region(T, 0)).wait(10)  # b's second band: read by the other streams
    early = waiter(disk, files[1], region(0, 0, rows=8))  # b's first chunk: held
    assert not early.wait(0.2)
    reads.go.set()
    assert early.wait(10)
    # every chunk of the plan's read order asked for once (the order itself: test_disk_order.py)
    loads = [(files[ins.tensor], *storage.byte_runs(storage.layout(files[ins.tensor]), ins.region))
             for ins in plan.instructions]
    order = read_order([(path, starts - header, run) for path, starts, run in loads], CHUNK)
    assert sorted(reads.reads) == sorted((str(c.file), header + c.start) for c in order)
    assert len(order) == 4 + 4 + 4  # a's first band whole, and half of each of b's rows


class Copies:
    """os.preadv that records the reads that copy (not the RWF_NOWAIT probes): (file, offset)."""

    def __init__(self, monkeypatch):
        self.reads = []
        real = os.preadv

        def preadv(fd, buffers, at, flags=0):
            if not flags & os.RWF_NOWAIT:
                self.reads.append((os.readlink(f"/proc/self/fd/{fd}"), at))
            return real(fd, buffers, at, flags)

        monkeypatch.setattr(disk_module.os, "preadv", preadv)


def read_ahead_to_the_end(plan, files):
    disk = PlanDisk.start(plan, files, "job", chunk=CHUNK)
    with disk._cond:
        assert disk._cond.wait_for(lambda: disk._over, 10)
    return disk


def test_chunks_in_the_page_cache_are_not_read_again(files, monkeypatch):
    """Files just written are in the page cache: the read-ahead finds every chunk there and
    copies none of them, nor makes a buffer to copy into, yet a load waiting for its chunks goes
    on."""
    copies, buffers = Copies(monkeypatch), []
    monkeypatch.setattr(disk_module, "bytearray", lambda n: buffers.append(n) or bytearray(n), raising=False)
    disk = read_ahead_to_the_end(plan_of(load(0, 0, 0, 0), load(1, 1, T, T)), files)
    assert waiter(disk, files[1], region(T, T)).wait(10)
    assert copies.reads == [] and [n for n in buffers if n >= CHUNK] == []  # (the probes: a byte each)


def test_a_file_out_of_the_page_cache_is_read_ahead(tmp_path, monkeypatch):
    """A file dropped from the page cache (written back, then let go) is read ahead: a chunk the
    probes find not cached is copied, and in the end every chunk is in the page cache. The loads
    read its second half, 1 MiB past the header, beyond what the kernel brings in when the header
    is read. A probe (RWF_NOWAIT) may itself start the kernel's read-ahead, which on a VM's disk
    can finish before the probe returns: then the chunk rightly counts as cached. So what each
    chunk held before its probe is asked with mincore (tests/job_files.in_page_cache), and every
    chunk that was not resident and that the probes found missing must have been copied; the
    first chunk, probed first (one stream), was not resident. On a file system that keeps every
    file in memory (tmpfs) nothing can be dropped: there every chunk is found cached, rightly."""
    monkeypatch.setattr(disk_module, "STREAMS", 1)
    path, chunk = tmp_path / "big.npy", 256 << 10
    np.save(path, np.zeros((1024, 512), np.float32))
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    copies = Copies(monkeypatch)
    probed: dict[int, tuple[bool, bool]] = {}  # chunk start -> (resident before, found and resident)
    real_cached = disk_module.cached

    def cached(fd, start, end):
        resident = in_page_cache(path, start)
        found = real_cached(fd, start, end)
        # found cached: it is, now (already, or brought in by the probe's own read-ahead)
        probed[start] = (resident, found and in_page_cache(path, start))
        return found

    monkeypatch.setattr(disk_module, "cached", cached)
    half = Region("x", (512, 0), (512, 512))
    disk = PlanDisk.start(plan_of(Load(id=0, deps=(), buffer=0, tensor=0, region=half)), {0: path}, "job",
                          chunk=chunk)
    with disk._cond:
        assert disk._cond.wait_for(lambda: disk._over, 10)
    first = storage.layout(path).offset + (1 << 20)
    chunks = [(str(path), first + i * chunk) for i in range(4)]
    assert set(copies.reads) <= set(chunks)
    if _in_memory_file_system(path):
        assert copies.reads == []
    else:
        assert probed[first][0] is False  # the first chunk was out of the page cache when probed
        copied = sorted(at for _, at in copies.reads)
        assert copied == sorted(at for at, (_, found) in probed.items() if not found)
    with open(path, "rb") as f:  # and every chunk is in the page cache now
        assert all(disk_module.cached(f.fileno(), at, at + chunk) for _, at in chunks)


def _in_memory_file_system(path) -> bool:
    mounts = [line.split() for line in open("/proc/self/mounts")]
    best = max((m for m in mounts if str(path).startswith(m[1].rstrip("/") + "/")), key=lambda m: len(m[1]))
    return best[2] in ("tmpfs", "ramfs")


def test_stopping_the_read_ahead_frees_every_waiting_load(files, monkeypatch):
    first = storage.byte_runs(storage.layout(files[2]), region(T, T))[0][0]  # its first byte
    reads = HeldReads(monkeypatch, files[2], int(first))
    disk = PlanDisk.start(plan_of(load(0, 0, 0, 0), load(1, 2, T, T)), files, "job", chunk=CHUNK)
    assert reads.held.wait(10)
    blocked = waiter(disk, files[2], region(T, T))
    assert not blocked.wait(0.2)
    disk.stop()
    assert blocked.wait(10)
    reads.go.set()


def test_a_file_the_read_ahead_cannot_read_is_left_to_its_load(files, tmp_path):
    missing = tmp_path / "missing.npy"
    os.mkfifo(tmp_path / "fifo.npy")
    paths = {0: missing, 1: tmp_path / "fifo.npy", 2: files[2]}
    disk = PlanDisk.start(plan_of(load(0, 0, 0, 0), load(1, 1, 0, 0), load(2, 2, 0, 0)), paths, "job",
                          chunk=CHUNK)
    for tensor in (0, 1, 2):  # nothing hangs: the loads then read (and fail) by themselves
        assert waiter(disk, paths[tensor], region(0, 0)).wait(10)
    with pytest.raises(storage.UserError, match="no such file"):
        storage.read_region_into(missing, region(0, 0), np.empty((T, T), np.float32))


@pytest.mark.parametrize("staged_first", [True, False])
def test_the_stores_write_back_starts_once_both_tiles_of_a_chunk_are_in(files, monkeypatch, staged_first):
    """With the staging copy made before the plan arrives, or after its reads are planned (the
    scheduler makes the copies beside the plan's first loads): the write-back table is built by
    the first store that asks (stores write only once the copies exist), never from a missing
    header at the plan's arrival."""
    staging = storage.staging_path(files[2], "job")
    if staged_first:
        storage.create_staging(files[2], (N, N), "f32", "job")
    started = []
    monkeypatch.setattr(fileio, "start_writeback", lambda fd, first, count: started.append((first, count)))
    stores = [Store(id=i, deps=(), buffer=i, tensor=2, region=region(0, col), unit=i)
              for i, col in enumerate((0, T))]
    disk = PlanDisk.start(plan_of(load(9, 0, 0, 0), *stores), files, "job", chunk=CHUNK)
    disk.wait(files[0], region(0, 0))  # the plan is read by now
    assert disk.writeback is None  # no store has asked yet
    if not staged_first:
        storage.create_staging(files[2], (N, N), "f32", "job")
    assert disk.tracks(staging) and not disk.tracks(files[0])
    values = np.ones((8, T), np.float32)
    for col in (0, T):
        piece = region(0, col, rows=8)
        storage.write_region(staging, piece, values, writeback=False)
        disk.written(staging, piece)
    disk.stop(wait_s=10)
    header = storage.layout(staging).offset
    assert started == [(header, CHUNK)]  # one write-back, of the whole chunk, after the second tile


def test_a_plan_without_loads_reads_nothing_and_is_over(files):
    staging = storage.create_staging(files[2], (N, N), "f32", "job")
    store = Store(id=0, deps=(), buffer=0, tensor=2, region=region(0, 0), unit=0)
    disk = PlanDisk.start(plan_of(store), files, "job", chunk=CHUNK)
    disk.wait(files[0], region(0, 0))  # no chunk of it: returns once the plan is read
    assert disk.tracks(staging)
    with disk._cond:  # its one stream found nothing to read and said so: no load can wait on it
        assert disk._cond.wait_for(lambda: disk._over, 10)
