"""The compiler's visible pipeline: one list of named stages, in order.

Each stage is `stage(module) -> module`. The input of the first stage is a Module holding only
the source (`ir.Module(file, text)`); `parse` fills in its kernels and `check` types them.

    STAGES = [("parse", parse_stage), ("check", check_stage)]

Running it: `run_pipeline(ir.Module(file, text))` runs every stage; `until="check"` stops after
the named stage (the front-end, `compiler.frontend.load.load_text`, does exactly that).

Debugging: set PHOBOS_DUMP_STAGES=1 (or `dump=True`) and each stage's output is printed to
stderr with compiler.frontend.ir_print, one `=== after <stage> ===` block per stage;
PHOBOS_DUMP_STAGES=check,mystage dumps only the named stages.

Verifying: `verify=True` (the tests use it) runs each stage's verifier on its output: after parse
every node has a real span; after check (and any later stage) every expression also has a type,
every name a kind and every var a shape of Sizes. A verifier failure is a compiler bug, so it
raises `PipelineBug` (an AssertionError), never a user error.

Adding a stage (for a later engineer, e.g. a lowering pass): write `my_stage(module) -> module`
in your own module and register it from there, after the stage it needs:

    from compiler import pipeline
    pipeline.add_stage("my_stage", my_stage, after="check", verifier=pipeline.verify_checked)

`add_stage` refuses a duplicate name, so importing a module twice cannot run a stage twice.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from compiler.frontend import ir, walk
from compiler.frontend.check import check
from compiler.frontend.ir_print import format_module
from compiler.frontend.parser import parse
from compiler.frontend.source import Span

Stage = Callable[[ir.Module], ir.Module]
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
    """Every dot carries its precision, consistent with its operand types, and no keyword left."""
    for e in walk.iter_body_exprs(k.body):
        if not (isinstance(e, ir.Call) and e.func == "dot"):
            continue
        if e.precision is None or e.kwargs:
            raise PipelineBug(f"dot at {e.span} has no resolved precision: {e.precision!r}, {e.kwargs!r}")
        _span_ok(e, e.precision.span)
        kinds = {a.ty.dtype if a.ty.dtype in ir.NARROW_FLOATS else "f32" for a in e.args}
        wanted = {e.precision.mode} if e.precision.mode in ir.NARROW_FLOATS else {"f32"}
        if kinds != wanted:
            raise PipelineBug(f"dot at {e.span}: precision {e.precision.mode} with operands {kinds}")


# ---- the stage list --------------------------------------------------------------------------

STAGES: list[tuple[str, Stage]] = [
    ("parse", parse_stage),
    ("check", check_stage),
]

VERIFIERS: dict[str, Verifier] = {
    "parse": verify_spans,
    "check": verify_checked,
}


def stage_names() -> tuple[str, ...]:
    return tuple(name for name, _ in STAGES)


def add_stage(name: str, stage: Stage, after: str | None = None, verifier: Verifier | None = None) -> None:
    """Insert a stage after the named one (at the end when `after` is None)."""
    names = stage_names()
    if name in names:
        raise ValueError(f"pipeline stage {name!r} is already registered")
    position = len(STAGES) if after is None else names.index(after) + 1
    STAGES.insert(position, (name, stage))
    VERIFIERS[name] = verifier or verify_checked


def _dump_selection(dump: bool | str | None) -> set[str] | bool:
    if dump is None:
        dump = os.environ.get("PHOBOS_DUMP_STAGES", "")
    if dump is True or dump in ("1", "all", "true", "yes"):
        return True
    if not dump:
        return False
    return {n.strip() for n in str(dump).split(",") if n.strip()}


def run_pipeline(
    module: ir.Module,
    until: str | None = None,
    dump: bool | str | None = None,
    verify: bool = False,
    out=None,
) -> ir.Module:
    """Run the stages in order (through `until`, inclusive). `dump`: True, False, or a comma list
    of stage names; None reads PHOBOS_DUMP_STAGES. `out` is where dumps go (stderr)."""
    if until is not None and until not in stage_names():
        raise ValueError(f"no pipeline stage {until!r}; stages: {', '.join(stage_names())}")
    selection = _dump_selection(dump)
    for name, stage in list(STAGES):
        module = stage(module)
        if verify:
            VERIFIERS.get(name, verify_checked)(module)
        if selection is True or (selection and name in selection):
            print(f"=== after {name} ===\n{format_module(module)}", file=out or sys.stderr)
        if name == until:
            break
    return module
