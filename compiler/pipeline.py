"""The compiler's visible pipelines: the named stages, in order. Each is a list of
common/pipeline.py `Stage(name, run)`, run by its one runner `run_stages` (stop after a stage,
dump each stage's output, time each stage); compiler/cuda/stages.py STAGES is the back end's.

The front end, source to a kernel bound to concrete sizes:

    FRONT_END_STAGES = ("parse", "check", "bind")

`parse` and `check` are `stage(module) -> module`, listed with their functions in STAGES. The input
of the first is a Module holding only the source (`ir.Module(file, text)`); `parse` fills in its
kernels and `check` types them. `bind` then takes one checked kernel and its dimension and tile
values to a Binding (`bind_stage`: dims, tile values, CTA grid).

    STAGES = [Stage("parse", parse_stage), Stage("check", check_stage)]

The cluster compiler, an @cluster kernel at concrete dims to a ClusterProgram:

    CLUSTER_STAGES = ("choose_values", "find_loop", "plan_accesses", "check_multiples",
                      "make_leaves", "build_units")

Each is `stage(state) -> state` over compiler/cluster/build.py's ClusterState, which implements
them (registered here with `@cluster_stage(name)`: this module imports nothing of the cluster
compiler, so the front end it serves stays below it); `run_cluster(state)` runs them in this order
(`cluster_stages()` is the list of Stages).

Running it: `run_pipeline(ir.Module(file, text))` runs every stage; `until="check"` stops after
the named stage (the front-end, `compiler.frontend.load.load_text`, does exactly that);
`timings=[]` collects each stage's (name, seconds) (common/pipeline.format_timings prints them).

Debugging: set PHOBOS_DUMP_STAGES=1 (or `dump=True`) and each stage's output is printed to
stderr, one `=== after <stage> ===` block per stage (a module with compiler.frontend.ir_print, a
binding as its values, a cluster stage as its state's `describe(stage)`);
PHOBOS_DUMP_STAGES=check,mystage dumps only the named stages.

Verifying: `verify=True` (the tests use it) runs each stage's verifier on its output: after parse
every node has a real span; after check (and any later stage) every expression also has a type,
every name a kind and every var a shape of Sizes. A verifier failure is a compiler bug, so it
raises `PipelineBug` (an AssertionError), never a user error.

Adding a stage (e.g. a lowering pass): write `my_stage(module) -> module`
in your own module and register it from there, after the stage it needs:

    from compiler import pipeline
    pipeline.add_stage("my_stage", my_stage, after="check", verifier=pipeline.verify_checked)

`add_stage` refuses a duplicate name, so importing a module twice cannot run a stage twice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from common import options
from common.pipeline import Stage, check_until, dump_selection, run_stages, selected
from compiler import builtins
from compiler.frontend import ir, walk
from compiler.frontend.binding import Binding, bind
from compiler.frontend.check import check
from compiler.frontend.ir_print import format_module
from compiler.frontend.parser import parse
from compiler.frontend.source import Span

Verifier = Callable[[ir.Module], None]


class PipelineBug(AssertionError):
    """A stage produced a module that breaks the IR's invariants: a bug in phobos."""


def parse_stage(module: ir.Module) -> ir.Module:
    return parse(module.text, module.file)


def check_stage(module: ir.Module) -> ir.Module:
    return check(module)


# ---- verifiers -------------------------------------------------------------------------------


def _span_ok(node, span: Span | None) -> None:
    if not isinstance(span, Span) or span.line < 1 or span.col < 1:
        raise PipelineBug(f"{type(node).__name__} has no source span: {node!r}")
    if (span.end_line, span.end_col) < (span.line, span.col):
        raise PipelineBug(f"{type(node).__name__} has a span that ends before it starts: {span}")


def _slice_items(node) -> tuple:
    return node.index if isinstance(node, ir.Load | ir.Store) else ()


def verify_spans(module: ir.Module) -> None:
    """Every kernel, parameter, attribute, statement, expression and slice item has a span."""
    for k in module.kernels:
        _span_ok(k, k.span)
        for node in (*k.params, *k.attributes):
            _span_ok(node, node.span)
        for s in walk.iter_stmts(k.body):
            _span_ok(s, s.span)
            for item in _slice_items(s):
                _span_ok(item, item.span)
            for e in walk.iter_exprs(s):
                _span_ok(e, e.span)
                for item in _slice_items(e):
                    _span_ok(item, item.span)


def verify_checked(module: ir.Module) -> None:
    """verify_spans, plus: every expression typed, every name resolved, every var's declared
    type made of Sizes, and the grid in x, y, z order covering every block index used."""
    verify_spans(module)
    for k in module.kernels:
        for s in walk.iter_stmts(k.body):
            if isinstance(s, ir.VarDecl):
                shape = s.declared.shape if isinstance(s.declared, ir.TileType) else ()
                if type(s.declared) not in (ir.ScalarType, ir.TileType) or not all(
                    isinstance(x, ir.Size) for x in shape
                ):
                    raise PipelineBug(f"var {s.name} has an unchecked declared type {s.declared!r}")
        for e in walk.iter_body_exprs(k.body):
            if e.ty is None:
                raise PipelineBug(f"untyped expression at {e.span}: {e!r}")
            if isinstance(e, ir.Name) and e.kind not in ("let", "var", "loop", "scalar", "dim", "tile"):
                raise PipelineBug(f"unresolved name {e.name} at {e.span}")
        _verify_dots(k)
        axes = tuple(g.axis for g in k.grid)
        if axes != ("x", "y", "z")[: len(axes)]:
            raise PipelineBug(f"kernel {k.name}: grid axes out of order: {axes}")
        if set(walk.block_axes_used(k)) - set(axes):
            raise PipelineBug(f"kernel {k.name}: a block index is used without a grid axis")


def _verify_dots(k: ir.Kernel) -> None:
    """Every dot carries its precision, consistent with its operand types, and no keyword left
    but an fp8 dot's two scales."""
    for e in walk.iter_body_exprs(k.body):
        if not builtins.is_contraction(e):
            continue
        scales = {k for k, _ in e.kwargs}
        fp8 = e.precision is not None and e.precision.mode in ir.FP8
        if e.precision is None or (scales != {"scale_a", "scale_b"} if fp8 else scales):
            raise PipelineBug(f"dot at {e.span} has no resolved precision: {e.precision!r}, {e.kwargs!r}")
        _span_ok(e, e.precision.span)
        own = ir.NARROW_FLOATS + ir.FP8
        kinds = {a.ty.dtype if a.ty.dtype in own else "f32" for a in e.args}
        wanted = {e.precision.mode} if e.precision.mode in own else {"f32"}
        if kinds != wanted:
            raise PipelineBug(f"dot at {e.span}: precision {e.precision.mode} with operands {kinds}")


# ---- the stage list --------------------------------------------------------------------------

STAGES: list[Stage] = [
    Stage("parse", parse_stage),
    Stage("check", check_stage),
]

VERIFIERS: dict[str, Verifier] = {
    "parse": verify_spans,
    "check": verify_checked,
}


def stage_names() -> tuple[str, ...]:
    return tuple(name for name, _ in STAGES)


def add_stage(name: str, stage: Callable[[ir.Module], ir.Module], after: str | None = None,
              verifier: Verifier | None = None) -> None:
    """Insert a stage after the named one (at the end when `after` is None)."""
    names = stage_names()
    if name in names:
        raise ValueError(f"pipeline stage {name!r} is already registered")
    position = len(STAGES) if after is None else names.index(after) + 1
    STAGES.insert(position, Stage(name, stage))
    VERIFIERS[name] = verifier or verify_checked


def _dump_selection(dump: bool | str | None) -> set[str] | bool:
    return dump_selection(options.current().dump_stages if dump is None else dump)


def run_pipeline(
    module: ir.Module,
    until: str | None = None,
    dump: bool | str | None = None,
    verify: bool = False,
    out=None,
    timings: list[tuple[str, float]] | None = None,
) -> ir.Module:
    """Run the stages in order (through `until`, inclusive). `dump`: True, False, or a comma list
    of stage names; None reads PHOBOS_DUMP_STAGES. `out` is where dumps go (stderr). `timings`
    gets each stage's (name, seconds)."""
    selection = _dump_selection(dump)

    def after_each(_index: int, name: str, module: ir.Module) -> None:
        if verify:
            VERIFIERS.get(name, verify_checked)(module)
        if selected(selection, name):
            print(f"=== after {name} ===\n{format_module(module)}", file=out or sys.stderr)

    return run_stages(STAGES, module, until=until, after_each=after_each, timings=timings)


def _dump(name: str, text: str, dump: bool | str | None, out) -> None:
    if selected(_dump_selection(dump), name):
        print(f"=== after {name} ===\n{text}", file=out or sys.stderr)


# ---- bind: the front end's last stage, one kernel at concrete sizes ----------------------------

FRONT_END_STAGES = ("parse", "check", "bind")


def format_binding(binding: Binding) -> str:
    def pairs(values) -> str:
        return ", ".join(f"{k}={v}" for k, v in values.items()) or "none"

    grid = " x ".join(str(n) for n in binding.grid) or "1"
    return f"dims: {pairs(binding.dims)}\ntile values: {pairs(binding.tile_values)}\nCTA grid: {grid}"


def bind_stage(kernel: ir.Kernel, dims, tile_values=None, dump: bool | str | None = None,
               out=None) -> Binding:
    """The checked `kernel` bound to `dims` and `tile_values` (compiler/frontend/binding.py)."""
    binding = bind(kernel, dims, tile_values=tile_values)
    _dump("bind", format_binding(binding), dump, out)
    return binding


# ---- the cluster compiler's stages ---------------------------------------------------------------

CLUSTER_STAGES = (
    "choose_values", "find_loop", "plan_accesses", "check_multiples", "make_leaves", "build_units",
)
_CLUSTER_IMPLEMENTATIONS: dict[str, Callable] = {}


def cluster_stage(name: str) -> Callable[[Callable], Callable]:
    """Register the implementation of the cluster stage `name` (a decorator)."""
    if name not in CLUSTER_STAGES:
        raise ValueError(f"no cluster stage {name!r}; stages: {', '.join(CLUSTER_STAGES)}")
    if name in _CLUSTER_IMPLEMENTATIONS:
        raise ValueError(f"cluster stage {name!r} is already registered")

    def register(stage: Callable) -> Callable:
        _CLUSTER_IMPLEMENTATIONS[name] = stage
        return stage

    return register


def cluster_stages() -> list[Stage]:
    """CLUSTER_STAGES with their implementations, in order."""
    missing = [name for name in CLUSTER_STAGES if name not in _CLUSTER_IMPLEMENTATIONS]
    if missing:
        raise PipelineBug(f"cluster stage {missing[0]!r} has no implementation (compiler/cluster/build.py)")
    return [Stage(name, _CLUSTER_IMPLEMENTATIONS[name]) for name in CLUSTER_STAGES]


def run_cluster(state, until: str | None = None, dump: bool | str | None = None, out=None,
                timings: list[tuple[str, float]] | None = None):
    """Run the cluster stages in order on `state` (through `until`, inclusive); dumps as above."""
    check_until(cluster_stages(), until, "cluster stage")

    def after_each(_index: int, name: str, state) -> None:
        _dump(name, state.describe(name), dump, out)

    return run_stages(cluster_stages(), state, until=until, after_each=after_each, timings=timings,
                      what="cluster stage")
