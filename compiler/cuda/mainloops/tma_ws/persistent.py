"""The warp-specialized TMA ring on a persistent grid (Schedule.persistent = P): P CTAs (the GPU's
multiprocessors, one CTA each) instead of one per output tile; CTA b takes tiles b, b + P, b + 2P, ...
of the kernel's grid in its CTA order (row or grouped, render_plan.cta_order, so that neighbouring
tiles still share operands in L2). The kernel's body becomes the body of that tile loop.

The roles keep their own tile loops, each after its own `setmaxnreg` (a warp's register count must
hold over all the code it runs after the change, so the two roles share no loop):

    set-up: ring buffers, mbarriers (once per CTA)
    producer: for each tile { the scalar lets before the loop again; its k-loop's copies }
    consumers: for each tile { the kernel's body: k-loop (wait, MMA, release), epilogue }

The ring's stage and phase come from a count of ring iterations that runs across tiles (DONE: each
thread counts the iterations of its CTA's earlier tiles, the producer's thread and the consumers
alike, so both sides agree on every stage's phase), so the producer runs ahead into the next tile's
k-loop as soon as stages are released, while the consumers do this tile's epilogue: the epilogue and
the next prologue overlap. A consumer iteration releases the previous iteration's stage of the same
tile; the last stage of a tile is released after the loop's final wait (end_of_ring).

The TMA store (mainloops/tma_ws/store.py) cannot stage the tile in the spent ring here (the producer is
already refilling it): it takes a buffer of its own, which the ring's depth leaves room for
(staging_bytes), and its bulk stores' reads are awaited before the next tile writes that buffer,
not right after they are issued (the consumers go on to the next tile's MMAs meanwhile).

Pruned where it cannot pay: a grid of at most P tiles (one tile per CTA: nothing to overlap), a
grid of whole waves over a long loop (LONG_LOOP iterations or more: the epilogue is a small part),
and everything but a single dot's ring at the kernel's top level (no ping-pong, no TF32 ring, no
longest-first grid).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from compiler.cuda.emit import Emitter
from compiler.frontend import ir, walk

TILE = "tile_"  # C name of the output tile a CTA works on
DONE = "ring_done_"  # ring iterations of this CTA's earlier tiles (each thread keeps its own count)
BOX_BYTES = 128  # a TMA store box's row (mainloops/tma_ws/store.py)
LONG_LOOP = 256  # k-loop iterations past which a grid of whole waves gains nothing from persistence


def asked(gen_or_plan) -> int:
    """The persistent grid's CTAs the leaf's mainloop asks for (0: none)."""
    plan = getattr(gen_or_plan, "plan", gen_or_plan)
    return getattr(plan.mainloop, "persistent", 0)


def tiles_of(counts) -> int:
    return math.prod(counts)


def grid(counts, ctas: int) -> tuple[int, int, int]:
    """The launch grid: at most one CTA per tile."""
    return (min(ctas, tiles_of(counts)), 1, 1)


def tile_order(order, counts) -> tuple[dict, list[str]]:
    """Block indices of tile TILE (x fastest, z slowest) in the CTA order `order` (row or grouped,
    as render_plan.cta_order orders a launched grid): (block axis -> C name, the C lines)."""
    gx, gy = counts[0], counts[1]
    plane = gx * gy
    lines = [f"const int cta_z = {TILE} / {plane};", f"const int cta_id = {TILE} % {plane};"]
    if order.order == "grouped" and gx > 1 and gy > 1:
        g = min(order.group, gx)
        lines += [
            f"const int cta_first = (cta_id / {g * gy}) * {g};",
            f"const int cta_rows = min({gx} - cta_first, {g});",
            f"const int cta_x = cta_first + (cta_id % {g * gy}) % cta_rows;",
            f"const int cta_y = (cta_id % {g * gy}) / cta_rows;",
        ]
    else:
        lines += [f"const int cta_x = cta_id % {gx};", f"const int cta_y = cta_id / {gx};"]
    lines.append("(void)cta_x; (void)cta_y; (void)cta_z;")
    return {"x": "cta_x", "y": "cta_y", "z": "cta_z"}, lines


def top_depth(gen) -> int:
    """The emitter's depth of the kernel's top-level statements (inside the tile loop here)."""
    return 2 if asked(gen) else 1


def open_tiles(gen) -> None:
    """Before the kernel's body: the consumers' tile loop (the ring's set-up and the producer's own
    tile loop are spliced in before it, at gen.loop.tiles_at)."""
    gen.loop.tiles_at = len(gen.out.lines)
    _tile_loop(gen)


def close_tiles(gen) -> None:
    if not gen.loop.tma_split:  # the same work as the plain grid's: not a schedule of its own
        raise gen.pruned(gen.plan.kernel.span, "a persistent grid takes a TMA ring's loop")
    gen.out.close()
    if gen.used.tma_store:  # the last tile's bulk stores read shared memory until they are done
        gen.out.line("if (th_id == 0) tma_store_wait_read();")


def _tile_loop(gen) -> None:
    gen.out.line(f"int {DONE} = 0;")
    ctas = grid(gen.plan.counts, asked(gen))[0]
    tiles = tiles_of(gen.plan.counts)
    gen.out.open(f"for (int {TILE} = (int)blockIdx.x; {TILE} < {tiles}; {TILE} += {ctas})")
    gen.out.block(list(gen.plan.cta_order_lines))


@contextmanager
def hoisted(gen):
    """Code emitted inside goes before the consumers' tile loop (the ring's set-up, the producer)."""
    if not asked(gen):
        yield
        return
    saved, out = gen.out, Emitter()
    out.span = saved.span
    gen.out = out
    try:
        yield
    finally:
        gen.out = saved
        at = gen.loop.tiles_at
        saved.lines[at:at] = out.lines
        saved.spans[at:at] = out.spans
        gen.loop.tiles_at = at + len(out.lines)


def producer_tiles(gen, s: ir.For, emit_loop) -> None:
    """The producer's tile loop: the scalar lets before loop `s` again (its copies' coordinates are
    made of them) and `emit_loop((first, stop, step), DONE)`, its k-loop; the consumers' names are
    kept for their own loop."""
    pre = _before(gen, s)
    saved = gen.scope.saved()
    _tile_loop(gen)
    for stmt in pre:
        if isinstance(stmt, ir.Let) and isinstance(stmt.value.ty, ir.ScalarType):
            gen.stmt(stmt)
    first, stop, step = (gen.fresh(n) for n in ("first", "stop", "step"))
    gen.out.line(f"const int {first} = {gen.scalar(s.start)};")
    gen.out.line(f"const int {stop} = {gen.scalar(s.stop)};")
    gen.out.line(f"const int {step} = {gen.scalar(s.step)};")
    emit_loop((first, stop, step), DONE)
    gen.out.line(f"{DONE} += {trips(first, stop, step)};")
    gen.out.close()
    gen.scope.restore(saved)


def trips(first: str, stop: str, step: str) -> str:
    """The iterations of `for (k = first; k < stop; k += step)` (step > 0)."""
    return f"({stop} > {first} ? ({stop} - {first} + {step} - 1) / ({step}) : 0)"


def note_ring(gen, stages: int, bars: str, loop) -> None:
    """The consumers' ring, for end_of_ring: its trip count is named before their loop."""
    first, stop, step = loop
    name = gen.fresh("trips")
    gen.out.line(f"const int {name} = {trips(first, stop, step)};")
    gen.loop.persistent_ring = (stages, bars, name)


def end_of_ring(gen) -> None:
    """After the consumers' k-loop (its last MMA group awaited): release the tile's last stage and
    count the tile's iterations."""
    ring, gen.loop.persistent_ring = gen.loop.persistent_ring, None
    if ring is None:
        return
    stages, bars, n = ring
    last = f"({DONE} + {n} - 1) % {stages}"
    gen.out.line(f"if ({n} > 0 && th_lane == 0) mbar_arrive({bars} + 8 * ({stages} + {last}));")
    gen.out.line(f"{DONE} += {n};")


def staging_bytes(gen, s: ir.For) -> int:
    """Shared memory the TMA store's two buffers of one box take after loop `s` (a box: the tile's
    rows of 128 bytes; the largest 2-D tile a top-level store writes), for the ring to leave free;
    0 without the TMA store."""
    if not (asked(gen) and getattr(gen.plan.mainloop, "tma_store", False)):
        return 0
    body = list(gen.plan.kernel.body)
    rows = [0]
    for stmt in body[body.index(s) + 1:] if s in body else ():
        ty = stmt.value.ty if isinstance(stmt, ir.Store) else None
        if isinstance(ty, ir.TileType) and ty.rank == 2:
            rows.append(gen.size(ty.shape[0]))
    return 2 * max(rows) * BOX_BYTES


def _before(gen, s: ir.For) -> list[ir.Stmt]:
    body = list(gen.plan.kernel.body)
    return body[: body.index(s)]


def check(gen, s: ir.For) -> None:
    """Prune what the persistent grid cannot take or where it cannot pay (see the module's text)."""
    ctas = asked(gen)
    if not ctas:
        return
    if gen.plan.reversed_blocks:
        raise gen.pruned(s.span, "a persistent grid takes no longest-first grid")
    tiles = tiles_of(gen.plan.counts)
    if tiles <= ctas:
        raise gen.pruned(s.span, f"a persistent grid of {ctas} CTAs pays only past one wave ({tiles} tiles)")
    body = list(gen.plan.kernel.body)
    if s not in body:
        raise gen.pruned(s.span, "a persistent grid takes a loop at the kernel's top level")
    for stmt in _before(gen, s):
        if not _replayable(stmt):
            raise gen.pruned(stmt.span, "a persistent grid takes before its loop only tiles and the scalar "
                                        "lets of scalars (its producer evaluates those again)")
    iterations = _iterations(gen, s)
    if tiles % ctas == 0 and iterations is not None and iterations >= LONG_LOOP:
        raise gen.pruned(s.span, f"whole waves of {iterations}-iteration loops gain nothing from persistence")


def _replayable(stmt: ir.Stmt) -> bool:
    """A tile let or var (the consumers' alone), or a scalar let of scalars and no loads, which the
    producer can evaluate again in its own tile loop."""
    if isinstance(stmt, ir.VarDecl):
        return isinstance(stmt.declared, ir.TileType)
    if not isinstance(stmt, ir.Let):
        return False
    if isinstance(stmt.value.ty, ir.TileType):
        return True
    exprs = walk.iter_exprs(stmt.value)
    return not any(isinstance(e, ir.Load) or isinstance(getattr(e, "ty", None), ir.TileType) for e in exprs)


def _iterations(gen, s: ir.For) -> int | None:
    """The loop's trip count where its bounds are constants."""
    env = gen.plan.env

    def const(e):
        if isinstance(e, ir.Const):
            return int(e.value)
        if isinstance(e, ir.Name) and e.name in env:
            return env[e.name]
        return None

    a, b, c = const(s.start), const(s.stop), const(s.step)
    if None in (a, b, c) or c <= 0:
        return None
    return max(0, -(-(b - a) // c))
