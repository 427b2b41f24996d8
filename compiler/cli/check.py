"""`//compiler -- check FILE.phk`: parse and check a kernel file and describe its kernels.

For each kernel: its name, its grid axes (axis, dimension, tile), its attributes as written and
the size of its search spaces (@autotune, and @cluster when present). A kernel with @cluster also
goes through every rejection of the cluster compiler that does not depend on the dimensions, so a
kernel that checks builds a cluster program at any size, which the cluster runtime runs (an online
softmax's partials and a split's included: docs/cluster.md, "Splitting a cluster loop over nodes").
"""

from __future__ import annotations

import argparse
import math

from common.cli import user_path
from compiler.cli.args import add_cta_split_flag, cta_split
from compiler.cluster.build import check_cluster
from compiler.frontend import ir, walk
from compiler.frontend.load import load_file
from compiler.frontend.source import Span


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check", help="parse and check a kernel file; print its kernels, grids and search spaces"
    )
    parser.add_argument("file", help="the kernel source (.phk)")
    add_cta_split_flag(parser)
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    split = cta_split(args)
    module = load_file(user_path(args.file), display_name=args.file)
    for kernel in module.kernels:
        if kernel.cluster is not None:
            check_cluster(kernel)  # every cluster rejection that needs no dimension
    text = describe_module(module)
    if split is not None and split > 1:  # the user asks for a split: each kernel's loop must take it
        text += "\n" + "\n".join(describe_split(k, split) for k in module.kernels)
    print(text)
    return 0


def describe_split(kernel: ir.Kernel, split: int) -> str:
    """The split-loop --split N asks of `kernel`; CompileError at the loop when it cannot split."""
    from compiler.cluster.accumulate import Accumulator
    from compiler.cuda.mainloops.split_loop.transform import split_form

    sf = split_form(kernel)
    form = "a linear accumulator" if isinstance(sf.form, Accumulator) else "an online softmax (m, l, acc)"
    at = f"{sf.loop.span.line}:{sf.loop.span.col}"
    return (f"kernel {kernel.name}: split over {split} CTAs: the loop at {at} carries {form}; "
            f"its chunks take ctx.block.{sf.axis}, a combine kernel merges them")


def span_text(text: str, span: Span) -> str:
    """The source characters a span covers (joined with spaces when it spans lines)."""
    lines = text.splitlines()
    if span.line == span.end_line:
        return lines[span.line - 1][span.col - 1 : span.end_col - 1]
    parts = [lines[span.line - 1][span.col - 1 :]]
    parts += [ln.strip() for ln in lines[span.line : span.end_line - 1]]
    parts.append(lines[span.end_line - 1][: span.end_col - 1].strip())
    return " ".join(p for p in parts if p)


def search_space_size(attribute: ir.Autotune | ir.Cluster | None) -> int:
    """The number of points of a search space: the product of each name's value count."""
    return math.prod(len(d.values) for d in attribute.dims) if attribute else 1


def describe_kernel(kernel: ir.Kernel, text: str) -> str:
    out = [f"kernel {kernel.name}"]
    if kernel.grid:
        out.append("  grid:")
        out += [
            f"    {g.axis}: dim {g.dim}, " + ("one CTA per element" if g.tile is None else f"tile {g.tile}")
            for g in kernel.grid
        ]
    else:
        out.append("  grid: one CTA (no ctx.block axis used)")
    if kernel.attributes:
        out.append("  attributes:")
        out += [f"    {span_text(text, a.span)}" for a in kernel.attributes]
    else:
        out.append("  attributes: none")
    at, cl = kernel.autotune, kernel.cluster
    if at:
        detail = ", ".join(f"{d.name}: {len(d.values)} ({', '.join(map(str, d.values))})" for d in at.dims)
        out.append(f"  @autotune search space: {search_space_size(at)} points [{detail}]")
    else:
        out.append("  @autotune search space: 1 point (no @autotune)")
    if cl:
        detail = ", ".join(f"{d.name}: {len(d.values)} ({', '.join(map(str, d.values))})" for d in cl.dims)
        out.append(f"  @cluster search space: {search_space_size(cl)} points [{detail}]")
    out.append(f"  threads per CTA: {kernel.threads}")
    out += _describe_dots(kernel)
    return "\n".join(out)


def _describe_dots(kernel: ir.Kernel) -> list[str]:
    """Each dot's precision and who chose it (docs/language.md §8.1)."""
    dots = [e for e in walk.iter_body_exprs(kernel.body) if isinstance(e, ir.Call) and e.precision]
    why = {"operands": "from its operands", "kernel": "from @precision", "dot": "from its precision argument"}
    return [
        f"  dot at {d.span.line}:{d.span.col}: {d.precision.mode} "
        + ("(the default)" if d.precision.mode == "f32" and d.precision.origin == "operands" else
           f"({why[d.precision.origin]})")
        for d in dots
    ]


def describe_module(module: ir.Module) -> str:
    return "\n\n".join(describe_kernel(k, module.text) for k in module.kernels)
