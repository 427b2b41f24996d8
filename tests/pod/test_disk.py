"""pod/disk.py on real files: the read-ahead thread reads a plan's chunks in order, a load waits
only for the chunks it needs, nothing keeps a load waiting once the read-ahead is over, and the
stores' write-back starts a whole chunk at a time."""

import os
import threading

import numpy as np
import pytest

from common import fileio, storage
from pod import disk as disk_module
from pod.disk import PlanDisk
from schemas.instructions import Load, NodePlan, Store
from schemas.program import Region

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
    """os.preadv that records what the read-ahead reads and holds it at one of its reads."""

    def __init__(self, monkeypatch, hold_at: int):
        self.reads, self.hold_at, self.go = [], hold_at, threading.Event()
        self.held = threading.Event()
        real = os.preadv

        def preadv(fd, buffers, offset):
            self.reads.append(offset)
            if len(self.reads) == self.hold_at:
                self.held.set()
                self.go.wait(10)
            return real(fd, buffers, offset)

        monkeypatch.setattr(disk_module.os, "preadv", preadv)


def waiter(disk, path, piece):
    done = threading.Event()
    threading.Thread(target=lambda: (disk.wait(path, piece), done.set()), daemon=True).start()
    return done


def test_a_load_waits_for_its_chunks_and_only_for_them(files, monkeypatch):
    reads = HeldReads(monkeypatch, hold_at=5)  # the read-ahead stops at its 5th chunk
    plan = plan_of(load(0, 0, 0, 0), load(1, 0, 0, T), load(2, 1, 0, 0), load(3, 1, T, 0))
    disk = PlanDisk.start(plan, files, "job", chunk=CHUNK)
    assert reads.held.wait(10)
    disk.wait(files[0], region(0, 0))  # a's first band: chunks 1-4, read
    later = waiter(disk, files[1], region(T, 0))  # b's second band: chunks 9-12
    early = waiter(disk, files[1], region(0, 0, rows=8))  # b's first chunk: the one held
    assert not early.wait(0.2) and not later.is_set()
    reads.go.set()
    assert early.wait(10) and later.wait(10)
    header = storage.layout(files[0]).offset
    assert reads.reads[:5] == [header + i * CHUNK for i in range(4)] + [header]  # a's band, then b's


def test_stopping_the_read_ahead_frees_every_waiting_load(files, monkeypatch):
    reads = HeldReads(monkeypatch, hold_at=1)
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


def test_the_stores_write_back_starts_once_both_tiles_of_a_chunk_are_in(files, monkeypatch):
    staging = storage.create_staging(files[2], (N, N), "f32", "job")
    started = []
    monkeypatch.setattr(fileio, "start_writeback", lambda fd, first, count: started.append((first, count)))
    stores = [Store(id=i, deps=(), buffer=i, tensor=2, region=region(0, col), unit=i)
              for i, col in enumerate((0, T))]
    disk = PlanDisk.start(plan_of(load(9, 0, 0, 0), *stores), files, "job", chunk=CHUNK)
    disk.wait(files[0], region(0, 0))  # the plan is read by now
    assert disk.tracks(staging) and not disk.tracks(files[0])
    values = np.ones((8, T), np.float32)
    for col in (0, T):
        piece = region(0, col, rows=8)
        storage.write_region(staging, piece, values, writeback=False)
        disk.written(staging, piece)
    header = storage.layout(staging).offset
    assert started == [(header, CHUNK)]  # one write-back, of the whole chunk, after the second tile
