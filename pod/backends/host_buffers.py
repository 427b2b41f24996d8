"""The CPU pod's buffer memory: reused once nothing references it, zeroed only where it must be.

A fresh buffer costs a page fault and the kernel's zeroing of every page on its first touch
(about 0.25 s/GiB here), paid again for every unit's buffers: the load that fills them or the leaf
that writes them runs that much slower. So a buffer of a size seen before takes the memory of an
earlier buffer that nothing references any more. That memory holds the earlier buffer's values:
it is zeroed before anything can read it or write part of it (`before_use`), unless something
writes the whole buffer first (`written_whole`: a load, whose region is the buffer's shape, or an
upload), and then it is never zeroed at all. To its users a buffer is all zeros until written,
as a fresh one is.

Every block starts on a page, so that a store can hand a buffer to the disk directly
(common/fileio.py write_runs, backend_cpu.py `stores_direct`), and a block of 2 MiB or more on
a huge page (`_aligned_zeros`).

A block of memory is idle when its only reference is this object's: every array or memoryview
made from a buffer holds it (numpy views keep the block as their base), so a
block still read by a store, a data-port send or a leaf is never handed out again, whatever freed
the buffer. At most IDLE_BYTES of idle blocks are kept (`trim`, at a job's end).
"""

from __future__ import annotations

import math
import mmap
import sys
import threading
import weakref

import numpy as np

MIN_BYTES = 1 << 20  # smaller buffers are allocated afresh each time: faults cost little there
IDLE_BYTES = 1 << 30
PAGE = 4096
HUGE_PAGE = 2 << 20  # x86-64's transparent huge page


class HostBuffers:
    def __init__(self, idle_bytes: int = IDLE_BYTES) -> None:
        self.idle_bytes = idle_bytes
        self._blocks: dict[int, list[np.ndarray]] = {}  # byte size -> every block of that size
        self._lock = threading.Lock()
        # id(buffer) -> (the buffer, weakly; the lock its zeroing holds), for buffers whose
        # zeroing is put off. Each entry leaves when its buffer dies, before its id can be
        # another's; dict operations are atomic, so the callbacks, which may run in any thread,
        # take no lock.
        self._unzeroed: dict[int, tuple[weakref.ref, threading.Lock]] = {}

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A buffer that reads as zeros: an idle block's memory, zeroed when first used, or
        fresh memory (zero already)."""
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < MIN_BYTES:
            return np.zeros(shape, dtype)
        with self._lock:
            blocks = self._blocks.setdefault(nbytes, [])
            idle = next((i for i in range(len(blocks)) if _idle(blocks, i)), None)
            if idle is None:
                # mapped afresh: the kernel zeroes its pages. Held here before the trim, which
                # would otherwise count it idle and could let it go (the list's last block then
                # being another, still in use, or none)
                block = _aligned_zeros(nbytes)
                blocks.append(block)
                self._trim()
            else:
                block = blocks[idle]
        buffer = block.view(dtype).reshape(shape)
        if idle is not None:
            key = id(buffer)
            ref = weakref.ref(buffer, lambda _, key=key: self._unzeroed.pop(key, None))
            self._unzeroed[key] = (ref, threading.Lock())
        return buffer

    def before_use(self, buffer: np.ndarray) -> None:
        """`buffer` (as `take` gave it) is about to be read or written in part: zero it now if
        its zeroing was put off. Two first uses at once (a serve's read beside a leaf's) both
        wait for the zeros: the entry leaves only once they are in."""
        entry = self._unzeroed.get(id(buffer))
        if entry is None:
            return
        ref, zeroing = entry
        with zeroing:
            if self._unzeroed.get(id(buffer)) is entry and ref() is buffer:
                _zero(buffer)
                self._unzeroed.pop(id(buffer), None)

    def written_whole(self, buffer: np.ndarray) -> None:
        """Every element of `buffer` was just written: its zeroing, if put off, is not needed."""
        self._unzeroed.pop(id(buffer), None)

    def trim(self) -> None:
        """Let idle blocks go beyond `idle_bytes`."""
        with self._lock:
            self._trim()

    def _trim(self) -> None:
        keep = self.idle_bytes
        for nbytes, blocks in self._blocks.items():
            for i in reversed([i for i in range(len(blocks)) if _idle(blocks, i)]):
                if keep >= nbytes:
                    keep -= nbytes
                else:
                    del blocks[i]


def _aligned_zeros(nbytes: int) -> np.ndarray:
    """A block: nbytes of fresh zeros, mapped from the kernel, starting on a PAGE, or on a
    HUGE_PAGE when it holds one at least. The kernel zeroes the pages as they are first touched
    (no `calloc` clearing them once more when glibc's heap, not a fresh mapping, holds them), and
    every 2 MiB of a large block is one transparent huge page (numpy's own 16 MiB arrays had 7 of
    their 8 and 512 page faults for the rest: a fresh buffer filled by a load cost 1.3-2x more,
    6 of them 34-119 ms against 26-60 ms here). The mapping's pages past the block are never
    touched; the mapping goes when the block does.

    The block is the base of every array made from it: numpy makes a view's base the first
    array up the chain that owns its memory or wraps another object, here the block itself,
    which wraps a memoryview of the mapping."""
    align = HUGE_PAGE if nbytes >= HUGE_PAGE else PAGE
    memory = mmap.mmap(-1, nbytes + align - PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if align == HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
        memory.madvise(mmap.MADV_HUGEPAGE)
    view = memoryview(memory)
    skip = -np.frombuffer(view, np.uint8).__array_interface__["data"][0] % align
    return np.frombuffer(view[skip:skip + nbytes], np.uint8)


def _zero(buffer: np.ndarray) -> None:
    buffer.fill(0)


def _idle(blocks: list[np.ndarray], i: int) -> bool:
    """Whether nothing references blocks[i] but the list: getrefcount sees the list's reference
    and its own argument's."""
    return sys.getrefcount(blocks[i]) == 2
