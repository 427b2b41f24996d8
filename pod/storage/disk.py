"""One plan's disk traffic, in the order pod/storage/disk_order.py gives it: threads that read the plan's
inputs ahead into the page cache, in plan order, in long reads (skipping the chunks found there
already, as on warm files); the loads wait for the chunks they need instead of reading them from
the disk themselves; and the stores' write-back handed to the disk a whole chunk at a time, by a
thread of its own, so that a store never waits for the disk's queue.

What is read and written does not change: a load still reads its bytes from the ORIGINAL file
(from the page cache when the read-ahead has been there), a store still writes into the staging
copy, and the commit's fsync makes every byte durable. Should anything fail here (a file that
cannot be opened, a short read), the read-ahead stops and the loads read for themselves, with
their own checks and errors. It never waits for a load, so a load waiting for it always ends.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

import numpy as np

from common import fileio, storage
from common.errors import UserError
from common.log import get_logger
from pod.host import available_host_memory
from pod.storage import disk_order
from schemas.instructions import Load, NodePlan, Store

log = get_logger()
MEMORY_SHARE = 4  # read ahead at most 1/MEMORY_SHARE of the memory the system has available
PROBES = 8  # pages of a chunk asked whether they are cached (`cached`): first, last and between
STREAMS = 4  # chunks asked for at once: on the H200 machine's disk, 4 readers beat 1 (docs/performance.md)


class PlanDisk:
    """Started when a plan arrives (`start`), stopped when it ends or is dropped (`stop`)."""

    def __init__(self, plan: NodePlan, paths: dict[int, Path], job_id: str,
                 chunk: int = disk_order.CHUNK_BYTES):
        self._plan, self._paths, self._job_id, self._chunk = plan, paths, job_id, chunk
        self._cond = threading.Condition()
        self._planned = False  # the read order is known
        self._over = False  # stopped, failed or every chunk read: nobody waits any more
        self._next = 0  # the first chunk no stream has taken yet
        self._done = np.zeros(0, bool)  # which chunks are read
        self._streams = 0  # streams still reading
        self._chunks: dict[Path, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # starts, ends, order
        self._layouts: dict[Path, storage.Layout | None] = {}
        self.writeback: disk_order.WriteBack | None = None  # built by the first store (`tracks`)
        self._writeback_lock = threading.Lock()
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()  # (file, first byte, end byte) to write back
        self._stopped = False
        self._worker = threading.Thread(target=self._work, name="pod-writeback", daemon=True)

    @classmethod
    def start(cls, plan: NodePlan, paths: dict[int, Path], job_id: str,
              chunk: int = disk_order.CHUNK_BYTES) -> PlanDisk:
        """`paths`: tensor -> its confined file. The plan is read in the thread, off the loop."""
        disk = cls(plan, paths, job_id, chunk)
        threading.Thread(target=disk._run, name="pod-readahead", daemon=True).start()
        disk._worker.start()
        return disk

    def stop(self, wait_s: float | None = None) -> None:
        """No more reading ahead; the write-backs asked for so far are still started (by the
        time this returns, when `wait_s` is given and they take no longer)."""
        with self._cond:
            self._over = True
            self._cond.notify_all()
            if not self._stopped:
                self._stopped = True
                self._tasks.put(None)
        if wait_s is not None:
            self._worker.join(wait_s)

    # ---- the loads' side -----------------------------------------------------------------------

    def wait(self, path: Path, region) -> None:
        """Return once every chunk holding bytes of `region` of `path` is read ahead (or the
        read-ahead is over): the load then finds them in the page cache."""
        self._await_plan()
        index = self._chunks.get(path)
        if index is None:
            return
        starts, run = self._runs(path, region)[1:]
        if not len(starts) or not run:
            return
        first, last = int(starts[0]), int(starts[-1]) + run
        chunk_starts, chunk_ends, order = index
        low, high = np.searchsorted(chunk_ends, first, "right"), np.searchsorted(chunk_starts, last, "left")
        if low >= high:
            return
        needed = order[low:high]
        with self._cond:
            self._cond.wait_for(lambda: self._over or self._done[needed].all())

    def _await_plan(self) -> None:
        """Return once the read order is known (or the read-ahead is over); the plan is read in
        a thread that waits for nothing, so this always ends."""
        with self._cond:
            self._cond.wait_for(lambda: self._planned or self._over)

    # ---- the stores' side ----------------------------------------------------------------------

    def tracks(self, staging: Path) -> bool:
        """Whether this plan starts the write-back of `staging` (else each store does its own).
        The first store to ask builds the write-back table of every store of the plan: a store
        writes only once its job's staging copies exist (pod/statemachine/machine.py), and the table needs
        their headers, so the plan's arrival is too early (the scheduler may still be creating
        them). Every store asks before it writes, so every byte counts toward its chunk."""
        with self._writeback_lock:
            if self.writeback is None:
                self.writeback = self._writeback_table()
        return staging in self.writeback

    def written(self, staging: Path, region) -> None:
        """A store wrote `region` into `staging` (a file this plan `tracks`) without starting its
        write-back: the write-back of every chunk now complete is started (by the write-back
        thread)."""
        for first, end in self.writeback.add(*self._runs(staging, region)):
            self._tasks.put((staging, first, end))

    def _work(self) -> None:
        """The write-back thread: the chunks handed to the disk in the order they completed,
        until `stop`."""
        while (task := self._tasks.get()) is not None:
            path, first, end = task
            try:
                with storage.open_regular(path) as f:
                    fileio.start_writeback(f.fileno(), self._layouts[path].offset + first, end - first)
            except (UserError, OSError) as err:  # only time is lost: the commit's fsync writes it all
                log.info("write-back not started", file=str(path), error=str(err))

    # ---- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            chunks = self._plan_chunks()
        except Exception as err:  # the loads read for themselves; nothing is lost but time
            log.info("read-ahead not planned", error=f"{type(err).__name__}: {err}")
            self.stop()
            return
        for _ in range(self._streams - 1):
            threading.Thread(target=self._stream, args=(chunks,), name="pod-readahead", daemon=True).start()
        self._stream(chunks)

    def _stream(self, chunks: list[disk_order.Chunk]) -> None:
        """One of the streams reading the chunks: each takes the next chunk not taken yet, so
        the chunks are asked for in their order, STREAMS at a time."""
        files: dict[Path, object] = {}
        # made for the first chunk not cached: on warm files none is, and four 8 MiB buffers
        # zeroed per plan (fresh memory, with Python's lock held) cost a CPU pod's job of 32
        # pieces about 30 ms of that lock here (py-spy)
        scratch = None
        try:
            while True:
                with self._cond:
                    if self._over or self._next >= len(chunks):
                        return
                    i, self._next = self._next, self._next + 1
                chunk = chunks[i]
                f = files.get(chunk.file)
                if f is None:
                    f = files[chunk.file] = storage.open_regular(chunk.file)
                offset = self._layouts[chunk.file].offset
                if not cached(f.fileno(), offset + chunk.start, offset + chunk.end):
                    if scratch is None:
                        scratch = memoryview(bytearray(self._chunk))
                    os.preadv(f.fileno(), [scratch[:chunk.end - chunk.start]], offset + chunk.start)
                with self._cond:
                    self._done[i] = True
                    self._cond.notify_all()
        except Exception as err:  # the loads read for themselves; nothing is lost but time
            log.info("read-ahead stopped", error=f"{type(err).__name__}: {err}")
            self.stop()
        finally:
            for f in files.values():
                f.close()
            with self._cond:
                self._streams -= 1
                if self._streams == 0:  # every chunk read (or given up): nobody waits any more
                    self._over = True
                    self._cond.notify_all()

    def _layout(self, path: Path) -> storage.Layout | None:
        if path not in self._layouts:
            try:
                self._layouts[path] = storage.layout(path)
            except (UserError, OSError):
                self._layouts[path] = None  # the load or store itself says what is wrong
        return self._layouts[path]

    def _runs(self, path: Path, region) -> disk_order.Runs | None:
        """The region's runs counted from the start of the file's data: the chunks' grid starts
        there, so that a band of rows whose size is a multiple of a chunk is whole chunks."""
        lay = self._layout(path)
        if lay is None:
            return None
        starts, run = storage.byte_runs(lay, region)
        return path, starts - lay.offset, run

    def _writeback_table(self) -> disk_order.WriteBack:
        stores = []
        try:
            for ins in self._plan.instructions:
                if isinstance(ins, Store) and ins.tensor in self._paths:
                    staging = storage.staging_path(self._paths[ins.tensor], self._job_id)
                    stores.append(self._runs(staging, ins.region))
        except Exception as err:  # each store then starts its own write-back: only time is lost
            log.info("write-back not planned", error=f"{type(err).__name__}: {err}")
            stores = []
        return disk_order.WriteBack((r for r in stores if r is not None), self._chunk)

    def _plan_chunks(self) -> list[disk_order.Chunk]:
        loads = [self._runs(self._paths[ins.tensor], ins.region) for ins in self._plan.instructions
                 if isinstance(ins, Load) and ins.tensor in self._paths]
        chunks = disk_order.read_order([r for r in loads if r is not None], self._chunk, _budget())
        for path in {c.file for c in chunks}:
            mine = sorted((c.start, c.end, i) for i, c in enumerate(chunks) if c.file == path)
            self._chunks[path] = tuple(np.array(column, np.int64) for column in zip(*mine, strict=True))
        with self._cond:  # everything a waiting load reads, before it may read it
            self._done = np.zeros(len(chunks), bool)
            self._streams = max(1, min(STREAMS, len(chunks)))  # the last one to end says it is over
            self._planned = True
            self._cond.notify_all()
        return chunks


def cached(fd: int, start: int, end: int) -> bool:
    """Whether bytes [start, end) of the file seem to be in the page cache already, as on warm
    files: then the read-ahead has nothing to bring in, and copying them once more only takes
    memory bandwidth and a core from the loads. PROBES pages spread over the range are each asked
    for one byte without waiting for the disk (RWF_NOWAIT answers EAGAIN for a page not cached).
    A page missed between the probes is read by its load itself: only time is lost."""
    probe = bytearray(1)
    last = max(start, end - 1)
    for i in range(PROBES):
        try:
            os.preadv(fd, [probe], start + (last - start) * i // (PROBES - 1), os.RWF_NOWAIT)
        except OSError:  # EAGAIN: not cached; anything else (a file system without RWF_NOWAIT): read
            return False
    return True


def _budget() -> int:
    """Bytes the read-ahead may hold in the page cache: a share of what the system has available."""
    return available_host_memory() // MEMORY_SHARE


def load_region(backend, path: Path, ins: Load, array, disk: PlanDisk | None) -> tuple[int, float]:
    """Run a load (in a worker thread): (bytes read from storage, seconds of the host-to-device
    copy). The region is read straight into the buffer `array` (CPU) or, piece by piece, into
    pinned host memory copied on asynchronously (GPU); each piece once the plan's read-ahead has
    brought it in."""
    _check_shape(f"load of {ins.region.tensor}", ins, array)

    def read(host: np.ndarray, first: int, count: int) -> int:
        piece = storage.region_rows(ins.region, first, count)
        if disk is not None:
            disk.wait(path, piece)
        return storage.read_region_into(path, piece, host)

    return backend.fill(array, read)


def store_region(backend, staging: Path, ins: Store, array, disk: PlanDisk | None) -> tuple[int, float]:
    """Run a store (in a worker thread): (bytes written to storage, seconds of the device-to-host
    copy). The plan starts the write-back of whole chunks of the staging copy once they are
    written."""
    _check_shape(f"store to {ins.region.tensor}", ins, array)
    tracked = disk is not None and disk.tracks(staging)

    def write(host: np.ndarray, first: int, count: int) -> int:
        piece = storage.region_rows(ins.region, first, count)
        nbytes = storage.write_region(staging, piece, host, not tracked, backend.stores_direct)
        if tracked:
            disk.written(staging, piece)
        return nbytes

    return backend.drain(array, write)


def _check_shape(what: str, ins: Load | Store, array) -> None:
    if tuple(ins.region.shape) != tuple(array.shape):
        raise UserError(f"{what}: region shape {list(ins.region.shape)} does not match buffer "
                        f"{ins.buffer} of shape {list(array.shape)}")
