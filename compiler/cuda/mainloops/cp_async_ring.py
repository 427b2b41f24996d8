"""The cp.async ring shared by the mma.sync, warpgroup-MMA and ping-pong mainloops: `stages`
shared buffers per operand filled by cp.async, the policy's copies_ahead iterations ahead; the
prologue issues the first ones (one commit group each, empty past the end, so that group
counting stays uniform). With a handover policy (ping-pong) mbarriers replace the CTA-wide
barrier and the commit groups (mainloops/pingpong/handover.py). Functions of the kernel's emitter (`gen`)."""

from __future__ import annotations

from compiler.cuda import operands
from compiler.cuda.mainloops.pingpong import handover as pingpong
from compiler.cuda.mainloops.simt import dots
from compiler.cuda.mainloops.wgmma import mma as wgmma
from compiler.cuda.schedule import ring_stages
from compiler.frontend import ir


def prologue(gen, policy, s: ir.For, tiles, bounds) -> dict:
    """The ring of loop `s`'s operand `tiles` ((let, role, transposed, tile) each) and its first
    copies; {} when an operand has no copy plan (it is then not pipelined)."""
    from compiler.cuda.loops import deferred_dot

    start, stop_name, step = bounds
    entries = []
    for st, role, transposed, tile in tiles:
        plan = operands.copy_plan(gen, tile, st.value)
        if plan is None:
            return {}
        entries.append((st, role, transposed, tile, plan))
    words = [operands.tile_floats(t) + (-operands.tile_floats(t)) % 4 for *_, t, _ in entries]
    handover = policy.handover  # stages handed over by mbarriers (mainloops/pingpong/handover.py): one behind
    if handover:
        pingpong.check(gen, s, deferred_dot(gen, s) is not None)
    used, limit = gen.smem.perm_floats, gen.plan.smem_limit
    stages = ring_stages(policy.stages, policy.fewest_stages, sum(words), used, limit)
    ahead = policy.copies_ahead(stages)
    first = gen.fresh("first")
    gen.out.line(f"const int {first} = {start};")
    bases = [_ring_buffer(gen, tile, stages * w) for w, (*_, tile, _) in zip(words, entries, strict=True)]
    if handover:
        pingpong.setup(gen, stages)
    per_word = [4 // t.elem_bytes for *_, t, _ in entries]
    for p in range(ahead):
        gen.out.line(f"const int {first}_{p} = {first} + {p} * ({step});")
        gen.out.open(f"if ({first}_{p} < {stop_name})")
        gen.scope.scalars[s.var] = (f"{first}_{p}", "i32")
        for (st, role, transposed, tile, plan), base, w in zip(entries, bases, words, strict=True):
            ring = dots.mma_let_tile(
                gen, st.value, role, transposed, ptr=f"({base} + {p * w * 4 // tile.elem_bytes})"
            )
            operands.issue_copy(gen, plan, ring, st.value)
        if handover:
            pingpong.filled(gen, str(p))
        gen.out.close()
        if not handover:
            gen.out.line("cp_async_commit();")
    if handover:
        pingpong.first_turn(gen)
    return {
        st.name: ("ring", st, role, transposed, plan, base, e * w, (stages, ahead), first)
        for (st, role, transposed, _, plan), base, w, e in zip(entries, bases, words, per_word, strict=True)
    }


def _ring_buffer(gen, tile, words: int) -> str:
    """A ring's shared buffer of `words` words, declared as a pointer to its elements: its C name
    (1024-byte aligned for warpgroup MMA's swizzled tiles)."""
    base = gen.fresh("ring")
    ring = gen.smem.alloc_perm(words, 256 if isinstance(tile, wgmma.CoreTile) else 4)
    gen.out.line(f"{tile.ctype}* const {base} = reinterpret_cast<{tile.ctype}*>{ring};")
    return base


def iteration(gen, policy, lets: list[ir.Let]) -> None:
    """One iteration: wait for this iteration's stage, one barrier (the stage about to be
    refilled was last read in the previous iteration), issue the copies `ahead` iterations
    ahead (or queue them for the end of the body), then point the lets at this iteration's stage."""
    gen.out.span = lets[0].span
    *_, (stages, ahead), first = gen.loop.pipelined[lets[0].name][:9]
    var_name, var_c, step, stop_name = gen.loop.pipelined[lets[0].name][9:]
    it = gen.fresh("it")
    gen.out.line(f"const int {it} = ({var_c} - {first}) / ({step});")
    gen.loop.ring_iteration = it
    if gen.loop.handover:  # no CTA-wide barrier: this iteration's stage, through its mbarrier
        pingpong.top(gen, it)
    else:
        gen.out.line(f"cp_async_wait<{ahead - 1}>();")
        if policy.async_proxy:  # what cp.async wrote, read next by the tensor cores' async proxy
            gen.out.line("fence_async_smem();")
        gen.sync()
    entries = [gen.loop.pipelined[s.name] for s in lets]

    def refill() -> None:
        nxt = gen.fresh("ahead")
        gen.out.line(f"const int {nxt} = {var_c} + {ahead} * ({step});")
        gen.out.open(f"if ({nxt} < {stop_name})")
        gen.scope.scalars[var_name] = (nxt, "i32")
        if gen.loop.handover:
            pingpong.before_refill(gen, f"({it} + {ahead})")
        for _, st, role, transposed, plan, base, size, *_ in entries:
            ptr = f"({base} + (({it} + {ahead}) % {stages}) * {size})"
            ring = dots.mma_let_tile(gen, st.value, role, transposed, ptr=ptr)
            operands.issue_copy(gen, plan, ring, st.value)
        if gen.loop.handover:
            pingpong.filled(gen, f"({it} + {ahead}) % {stages}")
        gen.scope.scalars[var_name] = (var_c, "i32")
        gen.out.close()
        if not gen.loop.handover:
            gen.out.line("cp_async_commit();")

    # the stage refilled was last read an iteration (warpgroup MMA: two) ago, which the barrier
    # above orders; so the copies may go here or after this iteration's dots (late_copies)
    if policy.late_copies:
        gen.loop.tail.append(refill)
    else:
        refill()
    for s in lets:
        _, st, role, transposed, plan, base, size, *_ = gen.loop.pipelined[s.name]
        cur = gen.fresh("stage")
        tile = dots.mma_let_tile(gen, st.value, role, transposed, ptr=cur)
        gen.out.line(f"{tile.ctype}* const {cur} = {base} + ({it} % {stages}) * {size};")
        gen.loop.ring_tiles.add(cur)
        gen.scope.vals[s.name] = tile
