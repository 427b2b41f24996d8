"""Leaf source texts: the user's kernel with @cluster blanked out, and the init/step pair of a
cluster loop.

Leaves keep the user's line and column numbers (the text before the kernel becomes blank lines,
@cluster becomes spaces), so an error inside a leaf still points at the user's line. Every leaf is
parsed and checked before it is handed out; a leaf that does not check is a bug of the cluster
compiler, never the user's mistake.
"""

from __future__ import annotations

from compiler import pipeline
from compiler.cluster.accumulate import Accumulator
from compiler.frontend import ir
from compiler.frontend.binding import Binding
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.source import Span
from schemas.program import Leaf


class LeafBug(RuntimeError):
    """A generated leaf failed to parse or check: an internal error of the cluster compiler."""


class KernelText:
    """The kernel's source laid out at its original lines and columns, editable by span."""

    def __init__(self, kernel: ir.Kernel):
        start = kernel.span
        self.text = "\n" * (start.line - 1) + " " * (start.col - 1) + kernel.source
        self.line_starts = [0]
        for i, ch in enumerate(self.text):
            if ch == "\n":
                self.line_starts.append(i + 1)

    def offset(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col - 1

    def bounds(self, span: Span) -> tuple[int, int]:
        return self.offset(span.line, span.col), self.offset(span.end_line, span.end_col)

    def of(self, span: Span) -> str:
        a, b = self.bounds(span)
        return self.text[a:b]

    def edited(self, edits: list[tuple[Span, str | None]]) -> str:
        """The text with each span replaced by its text, or blanked (None: spaces, newlines kept)."""
        text = self.text
        for span, new in sorted(edits, key=lambda e: self.bounds(e[0]), reverse=True):
            a, b = self.bounds(span)
            if new is None:
                new = "".join(ch if ch == "\n" else " " for ch in text[a:b])
            text = text[:a] + new + text[b:]
        return text


def main_leaf_text(kernel: ir.Kernel) -> str:
    return KernelText(kernel).edited([(kernel.cluster.span, None)])


def step_leaf_text(kernel: ir.Kernel, acc: Accumulator) -> str:
    """The user's kernel with the store turned into `C[r] = <acc term> + C[r]`: each launch adds
    its chunk's sum to the running sum held in the output's buffer."""
    kt = KernelText(kernel)
    edits: list[tuple[Span, str | None]] = [(kernel.cluster.span, None)]
    store = acc.store
    if acc.beta_term is None:
        index = kt.of(store.index[0].span.to(store.index[-1].span))
        edits.append((store.value.span, f"{kt.of(store.value.span)} + {store.tensor}[{index}]"))
    else:
        edits.append((acc.beta_term.span, kt.of(acc.c_old.span)))
    return kt.edited(edits)


def _search_entry(d: ir.SearchDim) -> str:
    return f"{d.name} in [{', '.join(str(v) for v in d.written)}]"


def tiled_index(tiled_axes, drop_last: bool = False) -> str:
    """The index of the output's super-tile split among CTAs: per axis `ctx.block.a * T :+ T` for a
    (grid axis, tile) pair, `:` for None; without the last axis for `drop_last`."""
    items = [":" if t is None else f"ctx.block.{t[0]} * {t[1]} :+ {t[1]}" for t in tiled_axes]
    return ", ".join(items[:-1] if drop_last else items)


def generated_header(kernel: ir.Kernel, out: ir.TensorParam, tiled_axes, params: list[str]) -> list[str]:
    """The attributes and the `kernel` line of a leaf generated over the output's super-tile: the
    @autotune entries of its tiles and of the output's dims, the @aligned promises among them, the
    user's @launch."""
    names = [t[1] for t in tiled_axes if t is not None]
    dims = [d for d in out.dims if isinstance(d, str)]
    tuned = {d.name: d for d in kernel.autotune.dims}
    entries = [_search_entry(tuned[n]) for n in dict.fromkeys(names + dims) if n in tuned]
    lines = []
    if entries:
        lines.append(f"@autotune({', '.join(entries)})")
    pairs = [
        f"{d} = {t}" for d, t in (kernel.aligned.pairs if kernel.aligned else ()) if d in dims and t in names
    ]
    if pairs:
        lines.append(f"@aligned({', '.join(pairs)})")
    if kernel.threads != 256:
        lines.append(f"@launch(threads = {kernel.threads})")
    lines.append(f"kernel {kernel.name}({', '.join(params)}) {{")
    return lines


def init_leaf_text(
    kernel: ir.Kernel, acc: Accumulator, tiled_axes: tuple[tuple[str, str] | None, ...]
) -> str:
    """A small kernel over the output's super-tile: `C[r] = 0.0` or `C[r] = beta * C[r]`.

    `tiled_axes` gives, per axis of C, the (grid axis, tile name) that splits it among the leaf's
    CTAs, or None for an axis each CTA takes whole."""
    kt = KernelText(kernel)
    out = next(t for t in kernel.tensors if t.name == acc.store.tensor)
    shape = ", ".join(str(d) for d in out.dims)
    params = [f"{out.name}: tensor<{out.dtype}>[{shape}]"] + [f"{s.name}: {s.dtype}" for s in kernel.scalars]
    lines = generated_header(kernel, out, tiled_axes, params)
    target = f"{out.name}[{tiled_index(tiled_axes)}]"
    value = "0.0" if acc.beta is None else f"({kt.of(acc.beta.span)}) * {target}"
    lines.append(f"  {target} = {value}")
    lines.append("}")
    return (
        "// init leaf generated by the cluster compiler: the output's super-tile before the first step\n"
        + "\n".join(lines)
        + "\n"
    )


def check_leaf(text: str, filename: str) -> ir.Kernel:
    """Parse and check a generated leaf; its only kernel, or LeafBug."""
    from compiler.frontend.load import load_text

    try:
        module = load_text(text, filename)
    except CompileError as err:
        raise LeafBug(
            f"cluster compiler bug: a generated leaf does not check:\n{err.render()}\n"
            f"--- leaf source ---\n{text}"
        ) from err
    if len(module.kernels) != 1:
        raise LeafBug(f"cluster compiler bug: a generated leaf holds {len(module.kernels)} kernels")
    return module.kernels[0]


def load_leaf(leaf: Leaf) -> tuple[ir.Kernel, Binding]:
    """The leaf's checked kernel and its binding at the leaf's dims and tile values: what every
    runner of a leaf (a pod, the PTX compile on the scheduler, the reference) starts from."""
    kernel = check_leaf(leaf.source, f"<cluster leaf {leaf.name}>")
    return kernel, pipeline.bind_stage(kernel, dict(leaf.dims), tile_values=dict(leaf.tile_values))
