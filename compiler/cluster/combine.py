"""Which of the two combinable forms a cluster loop has: a linear accumulator (accumulate.py),
combined by addition, or an online softmax (softmax.py), combined by the log-sum-exp rule.

A loop of neither form is rejected with the form it is closest to and the first reason it is not
that form: a loop that keeps several vars or takes a running `max` is read as an attempted online
softmax, any other as an attempted accumulator.
"""

from __future__ import annotations

from compiler import builtins
from compiler.cluster.accumulate import SHAPE, Accumulator, check_accumulator
from compiler.cluster.softmax import NotSoftmax, OnlineSoftmax, check_online_softmax
from compiler.frontend import ir, walk
from compiler.frontend.diagnostics import CompileError

Combine = Accumulator | OnlineSoftmax

FORMS = (
    "a cluster loop (a `for` whose step is an @cluster name) is accepted in two forms: a linear "
    "accumulator (`acc += ..`, stored as `C[..] = acc` or `alpha * acc + beta * c_old`) and an online "
    "softmax (running maximum, running sum and an accumulator rescaled by `exp(m - m_new)`, as in "
    "examples/flash_attention.phk)"
)


def _looks_like_softmax(kernel: ir.Kernel, loop: ir.For) -> bool:
    at = next(i for i, s in enumerate(kernel.body) if s is loop)
    decls = [s for s in kernel.body[:at] if isinstance(s, ir.VarDecl)]
    assigns = [s for s in walk.iter_stmts(loop.body) if isinstance(s, ir.Assign)]
    takes_max = any(
        builtins.pairwise(e) == "max"
        for s in loop.body
        for e in walk.iter_exprs(s)
    )
    return len(decls) >= 2 or any(a.op == "=" for a in assigns) or takes_max


def _cluster_wording(form: str, why: str) -> str:
    return f"{FORMS}; this loop is closest to the {FORM_NAMES[form]}, but {why}"


FORM_NAMES = {"softmax": "online softmax", "accumulator": "linear accumulator"}


def check_cluster_loop(kernel: ir.Kernel, loop: ir.For, explain=_cluster_wording) -> Combine:
    """The loop's combine form, or a CompileError naming the closest form and why it is not it:
    `explain(form, why)` words it ('softmax' or 'accumulator'; the split over CTAs words it its
    own way, compiler/cuda/mainloops/split_loop/transform.py)."""
    if _looks_like_softmax(kernel, loop):
        try:
            return check_online_softmax(kernel, loop)
        except NotSoftmax as why:
            raise CompileError(why.span, explain("softmax", why.why)) from None
    try:
        return check_accumulator(kernel, loop)
    except CompileError as err:
        raise CompileError(err.span, explain("accumulator", err.message.removeprefix(SHAPE + ": "))) from None
