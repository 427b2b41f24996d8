"""How a tile's elements are spread over a CTA's threads.

The CTA's T threads form a TR x TC grid (thread id = tr * TC + tc, so the TC threads that share
a row are neighbouring lanes of one warp whenever TC <= 32; row reductions are then warp
shuffles). A 2-D tile [R, C] gives each thread an (R/TR) x (C/TC) register block; a row vector
[R] is spread like the rows of a 2-D tile (replicated over the TC threads of a row), a column
vector like its columns, and a free-standing 1-D tile over all T threads.

Along one axis, extent E over P threads (`Dist`): when E >= P each thread owns E/P elements in
groups of V consecutive ones (V = 4 where E allows it, so that global and shared-memory accesses
are 16 bytes wide), the groups of the P threads interleaved: position = (i / V) * P * V + t * V +
i % V. When E < P, element t % E is owned by P / E threads (replicas); only the first (t < E)
stores or contributes to a reduction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


class LayoutError(Exception):
    """The point of the search space cannot be laid out on the CTA (reported as pruned)."""


@dataclass(frozen=True)
class Dist:
    extent: int
    threads: int
    thread_var: str  # the C variable holding this thread's index along the axis

    @property
    def replicated(self) -> bool:
        return self.extent < self.threads

    @property
    def count(self) -> int:
        return 1 if self.replicated else self.extent // self.threads

    @property
    def vector(self) -> int:
        if self.replicated:
            return 1
        for v in (4, 2, 1):
            if self.extent % (self.threads * v) == 0:
                return v
        return 1

    def position(self, local: str) -> str:
        """C expression of the element position owned at local index `local` (a C int expr)."""
        if self.extent == 1:
            return "0"
        if self.replicated:
            return f"({self.thread_var} % {self.extent})"
        v, p = self.vector, self.threads
        if v == 1:
            return f"(({local}) * {p} + {self.thread_var})"
        return f"((({local}) / {v}) * {p * v} + {self.thread_var} * {v} + ({local}) % {v})"

    def primary(self) -> str:
        """C condition true on the one thread that owns each element (replicas are false)."""
        return f"({self.thread_var} < {self.extent})" if self.replicated else "true"


def make_dist(extent: int, threads: int, thread_var: str) -> Dist:
    if extent <= 0:
        raise LayoutError(f"tile extent {extent} must be positive")
    if extent >= threads and extent % threads:
        raise LayoutError(f"tile extent {extent} is not a multiple of {threads} threads")
    if extent < threads and threads % extent:
        raise LayoutError(f"{threads} threads are not a multiple of tile extent {extent}")
    return Dist(extent, threads, thread_var)


Kind1D = Literal["row", "col", "flat"]


@dataclass(frozen=True)
class ThreadGrid:
    threads: int
    rows: int  # TR
    cols: int  # TC

    def dist2(self, shape: tuple[int, int]) -> tuple[Dist, Dist]:
        return make_dist(shape[0], self.rows, "th_r"), make_dist(shape[1], self.cols, "th_c")

    def dist1(self, extent: int, kind: Kind1D) -> Dist:
        if kind == "row":
            return make_dist(extent, self.rows, "th_r")
        if kind == "col":
            return make_dist(extent, self.cols, "th_c")
        return make_dist(extent, self.threads, "th_id")


def choose_thread_grid(
    threads: int,
    shapes2d: set[tuple[int, int]],
    dot_shapes: set[tuple[int, int]],
    row_extents: set[int],
    col_extents: set[int],
) -> ThreadGrid:
    """Pick TR x TC: every 2-D tile must divide evenly; then fewest elements per thread (no idle
    replicas), square register blocks for dot results (reuse of shared-memory reads), and TC <= 32
    (row reductions inside a warp)."""
    best: tuple | None = None
    tc = 1
    while tc <= threads:
        tr = threads // tc
        grid = ThreadGrid(threads, tr, tc)
        try:
            per_thread = 0
            squareness = 0.0
            for r, c in shapes2d:
                dr, dc = grid.dist2((r, c))
                per_thread = max(per_thread, dr.count * dc.count)
            for r, c in dot_shapes:
                dr, dc = grid.dist2((r, c))
                squareness += abs(dr.count - dc.count) / max(dr.count, dc.count)
            for e in row_extents:
                make_dist(e, tr, "th_r")
            for e in col_extents:
                make_dist(e, tc, "th_c")
        except LayoutError:
            tc *= 2
            continue
        score = (per_thread, squareness, 0 if tc <= 32 else 1, abs(tc - 16))
        if best is None or score < best[0]:
            best = (score, grid)
        tc *= 2
    if best is None:
        raise LayoutError(f"no arrangement of {threads} threads divides tiles {sorted(shapes2d)}")
    return best[1]
