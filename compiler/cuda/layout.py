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

    lane_group = 32  # threads of one warp that can share a row

    def coordinates(self) -> list[str]:
        """C lines defining th_r and th_c from th_id."""
        return [f"const int th_r = th_id / {self.cols};", f"const int th_c = th_id % {self.cols};"]

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


# -- the tensor-core layout ----------------------------------------------------------------------
#
# When a kernel's dot runs on tensor cores, every 2-D tile is laid out like the accumulator of
# `mma.sync.m16n8k16`: the CTA's W warps form a WR x WC grid, warp (wr, wc) owns the block
# rows [wr*R/WR, (wr+1)*R/WR) x cols [wc*C/WC, (wc+1)*C/WC), and inside it lane = 4*g + t holds,
# for every 16x8 sub-tile, rows g and g+8 and columns 2t and 2t+1. The thread coordinates are
# th_r = wr*8 + g (TR = 8*WR) and th_c = wc*4 + t (TC = 4*WC), so a thread's rows depend on th_r
# only and its columns on th_c only, as in ThreadGrid, and the four threads sharing a row inside
# a warp are neighbouring lanes (row reductions: xor 1, 2, then across the WC warps).

MMA_ROWS, MMA_COLS = 16, 8


@dataclass(frozen=True)
class MmaDist:
    """Along one axis of the tensor-core layout: `warps` warps, each `lanes` thread coordinates
    (8 along rows, 4 along columns) and sub-tiles of `granule` (16 rows or 8 columns)."""

    extent: int
    warps: int
    lanes: int
    granule: int
    thread_var: str

    replicated = False
    vector = 1

    @property
    def threads(self) -> int:
        return self.warps * self.lanes

    @property
    def per_warp(self) -> int:
        return self.extent // self.warps

    @property
    def count(self) -> int:
        return self.per_warp // self.lanes

    def position(self, local: str) -> str:
        v, lanes, g = self.thread_var, self.lanes, self.granule
        warp = f"({v} / {lanes}) * {self.per_warp}" if self.warps > 1 else "0"
        if lanes == 8:  # rows: local 2*s + h -> sub-tile s, half h (row g or g + 8)
            inner = f"(({local}) / 2) * {g} + (({local}) % 2) * 8 + {v} % 8"
        else:  # columns: local 2*s + e -> sub-tile s, column 2t + e
            inner = f"(({local}) / 2) * {g} + ({v} % 4) * 2 + ({local}) % 2"
        return f"({warp} + {inner})"

    def primary(self) -> str:
        return "true"


def make_mma_dist(extent: int, warps: int, rows: bool, thread_var: str) -> MmaDist | Dist:
    granule = MMA_ROWS if rows else MMA_COLS
    if extent == 1:  # a broadcast axis: every thread holds the one element
        return Dist(1, warps * (8 if rows else 4), thread_var)
    if extent % (warps * granule):
        what = "rows" if rows else "columns"
        raise LayoutError(
            f"tile extent {extent} does not split into {warps} warps of whole {granule}-{what[:-1]} "
            f"tensor-core tiles"
        )
    return MmaDist(extent, warps, 8 if rows else 4, granule, thread_var)


@dataclass(frozen=True)
class MmaGrid:
    threads: int
    warps_m: int  # WR
    warps_n: int  # WC

    lane_group = 4  # threads of one warp that share a row

    @property
    def rows(self) -> int:
        return 8 * self.warps_m

    @property
    def cols(self) -> int:
        return 4 * self.warps_n

    def dist2(self, shape: tuple[int, int]) -> tuple[MmaDist, MmaDist]:
        return (
            make_mma_dist(shape[0], self.warps_m, True, "th_r"),
            make_mma_dist(shape[1], self.warps_n, False, "th_c"),
        )

    def dist1(self, extent: int, kind: Kind1D):
        if kind == "row":
            return make_mma_dist(extent, self.warps_m, True, "th_r")
        if kind == "col":
            return make_mma_dist(extent, self.warps_n, False, "th_c")
        return make_dist(extent, self.threads, "th_id")

    def coordinates(self) -> list[str]:
        """C lines defining th_r and th_c from th_id."""
        return [
            "const int th_warp = th_id >> 5, th_lane = th_id & 31;",
            f"const int th_r = (th_warp / {self.warps_n}) * 8 + (th_lane >> 2);",
            f"const int th_c = (th_warp % {self.warps_n}) * 4 + (th_lane & 3);",
        ]


def choose_mma_grid(
    threads: int, shapes2d: set[tuple[int, int]], row_reductions: bool, warps_m: int | None = None,
    columns_over_warps: bool = True,
) -> MmaGrid:
    """Pick WR x WC for the tensor-core layout: every 2-D tile must split into whole 16x8
    sub-tiles per warp; kernels that reduce along rows keep WC = 1 where they can (rows never
    leave a warp), else (tiles of fewer rows than 16 per warp: decode's few query rows) the rows
    stay in one warp's M and the columns split over the warps, whose row reductions then meet in
    shared memory (reductions.lane_allreduce); otherwise the most square warp tile of the largest
    tile (fewest shared-memory fragment loads per MMA). `warps_m` pins WR (a tuner choice).
    `columns_over_warps=False` refuses that fallback (the caller tries fewer warps first)."""
    if row_reductions:
        try:
            return _choose_mma_grid(threads, shapes2d, True, warps_m)
        except LayoutError:
            if not columns_over_warps:
                raise
    return _choose_mma_grid(threads, shapes2d, False, warps_m)


def _choose_mma_grid(
    threads: int, shapes2d: set[tuple[int, int]], row_reductions: bool, warps_m: int | None
) -> MmaGrid:
    warps = threads // 32
    best: tuple | None = None
    for wr in [w for w in range(1, warps + 1) if warps % w == 0]:
        wc = warps // wr
        if warps_m is not None and wr != warps_m:
            continue
        if row_reductions and wc != 1:
            continue
        grid = MmaGrid(threads, wr, wc)
        try:
            for shape in shapes2d:
                grid.dist2(shape)
        except LayoutError:
            continue
        big = max(shapes2d, key=lambda s: s[0] * s[1], default=(16 * wr, 8 * wc))
        tm, tn = big[0] / wr, big[1] / wc
        score = abs(tm - tn) / max(tm, tn)
        if best is None or score < best[0]:
            best = (score, grid)
    if best is None:
        raise LayoutError(
            f"no arrangement of {warps} warps splits tiles {sorted(shapes2d)} into 16x8 tensor-core tiles"
            + (f" with {warps_m} warps along the rows" if warps_m else "")
        )
    return best[1]
