"""Software pipelining of a loop's dot operands (the loop's own code is codegen.for_loop).

Operands that are plain tensor loads depending only on the loop variable are fetched ahead:
f32 operands one iteration ahead into registers (prefetch_first / pipelined_lets), tensor-core
operands into a ring of shared buffers by cp.async (copy_pipeline / ring_lets). Functions of the
kernel's emitter (`gen`), as in mainloops/simt/dots.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda import analysis
from compiler.cuda.mainloops.pingpong import handover as pingpong
from compiler.cuda.mainloops.simt import dots
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
        if not (isinstance(st, ir.Let) and st.name in gen.plan.shared):
            continue
        load = st.value
        if load.tensor in gen.stored_tensors() or any(
            isinstance(x, ir.Name) and x.name in inner for x in walk.iter_exprs(load)
        ):
            continue
        transposed = analysis.shared_let_transposed(gen.plan.kernel.body, st.name)
        if st.name in gen.plan.tc_lets:
            tensor_core.append((st, transposed))
            continue
        # two buffers only for a loop nested in no other: an enclosing loop's next iteration
        # would refill buffer 0 with no barrier since its last reads
        copies = 1 if gen.loop.barriers else gen.plan.mainloop.shared_copies()
        tile = dots.shared_tile(gen, load, gen.plan.shared[st.name], transposed, copies)
        plan = dots.vector_plan(gen, tile, load, transposed)
        if plan is None:
            continue
        regs = gen.fresh("pf")
        gen.out.line(f"float4 {regs}[{plan['iters']}];")
        first = gen.fresh("first")
        gen.out.line(f"const int {first} = {start};")
        gen.scope.scalars[s.var] = (first, "i32")
        gen.out.open(f"if ({first} < {stop_name})")
        dots.load_regs(gen, plan, load, regs)
        gen.out.close()
        out[st.name] = (tile, plan, regs, load, (first, copies))
    if tensor_core:
        out.update(copy_pipeline(gen, s, tensor_core, start, stop_name, step))
    return out


def prefetched_floats(pipelined: dict) -> int:
    """Floats per thread of a loop's operands prefetched into registers by prefetch_first (its
    CUDA-core entries: (tile, vector plan, registers, load, buffers))."""
    return sum(4 * v[1]["iters"] for v in pipelined.values() if isinstance(v[1], dict) and "iters" in v[1])


def copy_pipeline(gen, s: ir.For, lets, start: str, stop_name: str, step: str) -> dict:
    """Tensor-core operands of a loop: the leaf's mainloop policy (mainloops/) stages them in its
    ring and issues the first copies before the loop."""
    shared = gen.plan.shared
    tiles = [(st, shared[st.name], tr, dots.mma_let_tile(gen, st.value, shared[st.name], tr, ptr=""))
             for st, tr in lets]
    return gen.plan.mainloop.ring_prologue(gen, s, tiles, (start, stop_name, step))


def ring_lets(gen, lets: list[ir.Let]) -> None:
    """One iteration of the loop's operand ring: the mainloop policy's."""
    gen.plan.mainloop.ring_lets(gen, lets)


def pipelined_lets(gen, lets: list[ir.Let]) -> None:
    """One iteration of the register-prefetched operands: store the registers fetched last
    iteration to shared memory, one barrier, fetch the next iteration's. With one buffer per
    operand a barrier first keeps the stores from overtaking the last iteration's reads; with
    two (Simt.double_buffer) iteration i writes buffer i % 2, last read in iteration i - 2, and
    iteration i - 1's barrier lies between: one barrier per iteration."""
    gen.out.span = lets[0].span
    tiles = {s.name: _current_buffer(gen, s) for s in lets}
    if any(gen.loop.pipelined[s.name][4][1] == 1 for s in lets):
        gen.sync_before_overwrite()
    for s in lets:
        _, plan, regs, *_ = gen.loop.pipelined[s.name]
        dots.store_regs(gen, plan, tiles[s.name], regs)
    gen.sync()
    for s in lets:
        gen.out.span = s.span
        _, plan, regs, load, _, var_name, var_c, step, stop_name = gen.loop.pipelined[s.name]
        nxt = gen.fresh("next")
        gen.out.line(f"const int {nxt} = {var_c} + {step};")
        gen.out.open(f"if ({nxt} < {stop_name})")
        gen.scope.scalars[var_name] = (nxt, "i32")
        dots.load_regs(gen, plan, load, regs)
        gen.scope.scalars[var_name] = (var_c, "i32")
        gen.out.close()
        gen.scope.vals[s.name] = tiles[s.name]


def _current_buffer(gen, s: ir.Let):
    """The shared buffer of a prefetched let in this iteration: its one buffer, or of its two
    (allocated one after the other) the one of this iteration's parity."""
    import dataclasses

    tile, _, _, _, (first, copies), _, var_c, step, _ = gen.loop.pipelined[s.name]
    if copies == 1:
        return tile
    size = tile.k * tile.ld
    parity = f"((({var_c}) - {first}) / ({step}) & 1)"
    return dataclasses.replace(tile, ptr=f"({tile.ptr} + {parity} * {size})")


def deferred_dot(gen, s: ir.For) -> ir.Call | None:
    """The warpgroup-MMA dot of loop `s` that a rotation may carry into the next iteration, or
    None: the body's last tensor-core dot when it accumulates into a variable (attention's
    `acc = acc * c + dot(p, v)`) that no other statement of the body reads or writes, and the
    body has another tensor-core dot before it (S = Q K^T). Outermost loops only: the kernel
    waits for the last group after them."""
    if not gen.plan.wgmma or gen.loop.barriers:
        return None
    at = analysis.tc_dots_at(gen.plan.tc_dots, s)
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
    deferred = deferred_dot(gen, s) if gen.plan.mainloop.rotate else None
    if deferred is None:
        return None
    steps = gen.size(deferred.args[0].ty.shape[1]) // 16
    first = analysis.tc_dots_at(gen.plan.tc_dots, s)[0][1]
    rot = Rotation(first, deferred, gen.fresh("kept_a"), gen.fresh("kept_b"))
    gen.out.line(f"unsigned {rot.frag}[{steps}][4];")
    gen.out.line(f"const unsigned short* {rot.stage} = nullptr;")
    return rot


def fill_rotation(gen) -> None:
    """At the end of the rotated loop's body: the kept dot's issue goes into the slot after the
    first dot's commit (or, where the deferred dot could not be kept, a plain wait)."""
    from compiler.cuda.emit import Emitter

    rot = gen.loop.rotation
    if rot.slot is None:
        return
    at, depth = rot.slot
    out = Emitter()
    out.depth, out.span = depth, gen.out.spans[at - 1]
    turn = f"{pingpong.pass_turn()} " if gen.loop.turns else ""  # the other warpgroup's dots next
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
    rot = gen.loop.rotation
    if gen.loop.turns:
        pingpong.last_turn(gen)
    if rot.issue is None:
        return
    gen.out.open(f"if ({rot.stage} != nullptr)")
    gen.out.line("wg_fence();")
    gen.out.block(rot.issue)
    gen.out.line("wg_commit();")
    gen.out.close()
