"""Software pipelining of a loop's dot operands (the loop's own code is codegen.for_loop).

Operands that are plain tensor loads depending only on the loop variable are fetched ahead:
f32 operands one iteration ahead into registers (prefetch_first / pipelined_lets), tensor-core
operands into a ring of shared buffers by cp.async (copy_pipeline / ring_lets). Functions of the
kernel's emitter (`gen`), as in dots.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda import analysis, dots, operands, pingpong, tma, tma_tf32, wgmma, wgmma_tf32
from compiler.cuda.schedule import ring_stages
from compiler.frontend import ir


def prefetch_first(gen, s: ir.For, start: str, stop_name: str, step: str) -> dict:
    """Software pipelining: the loop's dot operands that are plain tensor loads depending only
    on the loop variable are loaded one iteration ahead into registers, so that their global
    reads overlap the previous iteration's arithmetic. Loads the first iteration's here."""
    from compiler.frontend import walk

    inner = {st.name for st in walk.iter_stmts(s.body) if isinstance(st, ir.Let | ir.VarDecl)}
    inner |= {st.var for st in walk.iter_stmts(s.body) if isinstance(st, ir.For)}
    out, tensor_core = {}, []
    for st in s.body:
        if not (isinstance(st, ir.Let) and st.name in gen.shared):
            continue
        load = st.value
        if load.tensor in gen.stored_tensors() or any(
            isinstance(x, ir.Name) and x.name in inner for x in walk.iter_exprs(load)
        ):
            continue
        transposed = analysis.shared_let_transposed(gen.kernel.body, st.name)
        if st.name in gen.tc_lets:
            tensor_core.append((st, transposed))
            continue
        tile = dots.shared_tile(gen, load, gen.shared[st.name], transposed)
        plan = dots.vector_plan(gen, tile, load, transposed)
        if plan is None:
            continue
        regs = gen.fresh("pf")
        gen.out.line(f"float4 {regs}[{plan['iters']}];")
        first = gen.fresh("first")
        gen.out.line(f"const int {first} = {start};")
        gen.scalars[s.var] = (first, "i32")
        gen.out.open(f"if ({first} < {stop_name})")
        dots.load_regs(gen, plan, load, regs)
        gen.out.close()
        out[st.name] = (tile, plan, regs, load)
    if tensor_core:
        out.update(copy_pipeline(gen, s, tensor_core, start, stop_name, step))
    return out


def copy_pipeline(gen, s: ir.For, lets, start: str, stop_name: str, step: str) -> dict:
    """Tensor-core operands of a loop: a ring of `stages` shared buffers filled by cp.async,
    stages - 1 iterations ahead; the prologue here issues the first stages - 1 iterations
    (one commit group each, empty past the end, so that group counting stays uniform)."""
    entries = []
    tiles = [(st, gen.shared[st.name], tr, dots.mma_let_tile(gen, st.value, gen.shared[st.name], tr, ptr=""))
             for st, tr in lets]
    if any(isinstance(t, wgmma.CoreTile) and t.dtype == "f32" for *_, t in tiles):  # TF32 warpgroup MMA
        if gen.schedule.tma:  # raw tiles by bulk tensor copies, rounded in shared memory
            return tma_tf32.ring_prologue(gen, s, tiles, start, stop_name, step)
        return wgmma_tf32.ring_prologue(gen, s, tiles, start, stop_name, step)
    if gen.wgmma and gen.schedule.tma:  # a producer warpgroup's bulk tensor copies
        carried = deferred_dot(gen, s) is not None
        return tma.ring_prologue(gen, s, tiles, (start, stop_name, step), carried)
    for st, role, transposed, tile in tiles:
        plan = operands.copy_plan(gen, tile, st.value)
        if plan is None:
            return {}
        entries.append((st, role, transposed, tile, plan))
    words = [operands.tile_floats(t) + (-operands.tile_floats(t)) % 4 for *_, t, _ in entries]
    handover = gen.schedule.pingpong  # stages handed over by mbarriers (pingpong.py): one behind
    if handover:
        pingpong.check(gen, s, deferred_dot(gen, s) is not None)
    # warpgroup MMA leaves one group in flight past its iteration, so the stage it reads is
    # refilled one iteration later: copies run stages - 2 ahead, with at least 3 stages
    low = pingpong.MIN_STAGES if handover else 3 if gen.wgmma else 2
    stages = ring_stages(gen.schedule.stages, low, sum(words), gen.perm_floats, gen.smem_limit)
    ahead = stages - 3 if handover else stages - 2 if gen.wgmma else stages - 1
    first = gen.fresh("first")
    gen.out.line(f"const int {first} = {start};")
    bases = [_ring_buffer(gen, tile, stages * w) for w, (*_, tile, _) in zip(words, entries, strict=True)]
    if handover:
        pingpong.setup(gen, stages)
    per_word = [4 // t.elem_bytes for *_, t, _ in entries]
    for p in range(ahead):
        gen.out.line(f"const int {first}_{p} = {first} + {p} * ({step});")
        gen.out.open(f"if ({first}_{p} < {stop_name})")
        gen.scalars[s.var] = (f"{first}_{p}", "i32")
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
    ring = gen.alloc_perm(words, 256 if isinstance(tile, wgmma.CoreTile) else 4)
    gen.out.line(f"{tile.ctype}* const {base} = reinterpret_cast<{tile.ctype}*>{ring};")
    return base


def ring_lets(gen, lets: list[ir.Let]) -> None:
    """One iteration of the copy pipeline: wait for this iteration's stage, one barrier
    (the stage about to be refilled was last read in the previous iteration), issue the
    copies stages - 1 iterations ahead (or queue them for the end of the body), then point the
    lets at this iteration's stage."""
    if gen.pipelined[lets[0].name][0] == "regring":
        return wgmma_tf32.ring_lets(gen, lets)
    if gen.pipelined[lets[0].name][0] == "tmaring":
        return tma.ring_lets(gen, lets)
    if gen.pipelined[lets[0].name][0] == "tmatf32":
        return tma_tf32.ring_lets(gen, lets)
    gen.out.span = lets[0].span
    *_, (stages, ahead), first = gen.pipelined[lets[0].name][:9]
    var_name, var_c, step, stop_name = gen.pipelined[lets[0].name][9:]
    it = gen.fresh("it")
    gen.out.line(f"const int {it} = ({var_c} - {first}) / ({step});")
    gen.ring_iteration = it
    if gen.handover:  # no CTA-wide barrier: this iteration's stage, through its mbarrier
        pingpong.top(gen, it)
    else:
        gen.out.line(f"cp_async_wait<{ahead - 1}>();")
        if gen.wgmma:  # what cp.async wrote, read next by the tensor cores' async proxy
            gen.out.line("fence_async_smem();")
        gen.sync()
    entries = [gen.pipelined[s.name] for s in lets]

    def refill() -> None:
        nxt = gen.fresh("ahead")
        gen.out.line(f"const int {nxt} = {var_c} + {ahead} * ({step});")
        gen.out.open(f"if ({nxt} < {stop_name})")
        gen.scalars[var_name] = (nxt, "i32")
        if gen.handover:
            pingpong.before_refill(gen, f"({it} + {ahead})")
        for _, st, role, transposed, plan, base, size, *_ in entries:
            ptr = f"({base} + (({it} + {ahead}) % {stages}) * {size})"
            ring = dots.mma_let_tile(gen, st.value, role, transposed, ptr=ptr)
            operands.issue_copy(gen, plan, ring, st.value)
        if gen.handover:
            pingpong.filled(gen, f"({it} + {ahead}) % {stages}")
        gen.scalars[var_name] = (var_c, "i32")
        gen.out.close()
        if not gen.handover:
            gen.out.line("cp_async_commit();")

    # the stage refilled was last read an iteration (warpgroup MMA: two) ago, which the barrier
    # above orders; so the copies may go here or after this iteration's dots (Schedule.late_copies)
    if gen.schedule.late_copies:
        gen.loop_tail.append(refill)
    else:
        refill()
    for s in lets:
        _, st, role, transposed, plan, base, size, *_ = gen.pipelined[s.name]
        cur = gen.fresh("stage")
        tile = dots.mma_let_tile(gen, st.value, role, transposed, ptr=cur)
        gen.out.line(f"{tile.ctype}* const {cur} = {base} + ({it} % {stages}) * {size};")
        gen.ring_tiles.add(cur)
        gen.vals[s.name] = tile


def pipelined_lets(gen, lets: list[ir.Let]) -> None:
    gen.out.span = lets[0].span
    gen.sync_before_overwrite()
    for s in lets:
        tile, plan, regs, *_ = gen.pipelined[s.name]
        dots.store_regs(gen, plan, tile, regs)
    gen.sync()
    for s in lets:
        gen.out.span = s.span
        tile, plan, regs, load, var_name, var_c, step, stop_name = gen.pipelined[s.name]
        nxt = gen.fresh("next")
        gen.out.line(f"const int {nxt} = {var_c} + {step};")
        gen.out.open(f"if ({nxt} < {stop_name})")
        gen.scalars[var_name] = (nxt, "i32")
        dots.load_regs(gen, plan, load, regs)
        gen.scalars[var_name] = (var_c, "i32")
        gen.out.close()
        gen.vals[s.name] = tile


def deferred_dot(gen, s: ir.For) -> ir.Call | None:
    """The warpgroup-MMA dot of loop `s` that a rotation may carry into the next iteration, or
    None: the body's last tensor-core dot when it accumulates into a variable (attention's
    `acc = acc * c + dot(p, v)`) that no other statement of the body reads or writes, and the
    body has another tensor-core dot before it (S = Q K^T). Outermost loops only: the kernel
    waits for the last group after them."""
    if not gen.wgmma or gen.loop_barriers:
        return None
    at = analysis.tc_dots_at(gen.leaf.plan.tc_dots, s)
    if len(at) < 2 or at[0][0] == at[-1][0]:
        return None
    st, dot = s.body[at[-1][0]], at[-1][1]
    if not isinstance(st, ir.Assign) or gen.dot_split(st)[0] is not dot:
        return None
    if any(analysis.touches(x, st.name) for x in s.body if x is not st):
        return None
    return dot


@dataclass
class Rotation:
    """A loop rotated for warpgroup MMA (Schedule.rotate): its deferred dot (attention's P V) is
    not issued where it stands. Its A fragments (packed from registers) and its b stage are kept
    in `frag` and `stage`, and the next iteration issues it right after its first dot (S = Q K^T)
    and waits for the first dot alone, so the tensor cores run P V while that iteration's
    softmax begins. The deferred statement first waits for every group, since it writes the
    accumulator. After the loop the last one is issued. `stage` is null until an iteration has
    kept one. The b stage stays valid: copies run stages - 2 ahead, so it is refilled two
    iterations later, after a barrier that follows the wait."""

    first: ir.Call  # the body's first tensor-core dot
    deferred: ir.Call  # the dot carried into the next iteration (loops.deferred_dot)
    frag: str  # C name of the kept A fragments, [k steps][4]
    stage: str  # C name of the kept b stage pointer
    slot: tuple[int, int] | None = None  # (line, depth) after the first dot's commit
    issue: list[str] | None = None  # the kept dot's wgmma lines, once the deferred dot is emitted


def rotation(gen, s: ir.For) -> Rotation | None:
    """The loop's Rotation when the schedule asks for it and the loop has a dot to carry
    (deferred_dot); declares the kept state before the loop."""
    deferred = deferred_dot(gen, s) if gen.schedule.rotate else None
    if deferred is None:
        return None
    steps = gen.size(deferred.args[0].ty.shape[1]) // 16
    first = analysis.tc_dots_at(gen.leaf.plan.tc_dots, s)[0][1]
    rot = Rotation(first, deferred, gen.fresh("kept_a"), gen.fresh("kept_b"))
    gen.out.line(f"unsigned {rot.frag}[{steps}][4];")
    gen.out.line(f"const unsigned short* {rot.stage} = nullptr;")
    return rot


def fill_rotation(gen) -> None:
    """At the end of the rotated loop's body: the kept dot's issue goes into the slot after the
    first dot's commit (or, where the deferred dot could not be kept, a plain wait)."""
    from compiler.cuda.emit import Emitter

    rot = gen.rotation
    if rot.slot is None:
        return
    at, depth = rot.slot
    out = Emitter()
    out.depth, out.span = depth, gen.out.spans[at - 1]
    turn = f"{pingpong.pass_turn()} " if gen.turns else ""  # the other warpgroup's dots next
    if rot.issue is None:
        out.line(f"{turn}wg_wait_all();")
    else:
        out.open(f"if ({rot.stage} != nullptr)")
        out.line("wg_fence();")
        out.block(rot.issue)
        out.line(f"wg_commit(); {turn}wg_wait_one();")
        out.close(" else {")
        out.depth += 1
        out.line(f"{turn}wg_wait_all();")
        out.close()
    gen.out.lines[at:at] = out.lines
    gen.out.spans[at:at] = out.spans


def issue_kept(gen) -> None:
    """After the rotated loop: the last iteration's kept dot."""
    rot = gen.rotation
    if gen.turns:
        pingpong.last_turn(gen)
    if rot.issue is None:
        return
    gen.out.open(f"if ({rot.stage} != nullptr)")
    gen.out.line("wg_fence();")
    gen.out.block(rot.issue)
    gen.out.line("wg_commit();")
    gen.out.close()
