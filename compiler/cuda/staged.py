"""Which shared-memory buffer a dot operand already lives in, whichever dot emitter staged it.

Its own module because both dot emitters ask it (mainloops/simt/dots.py for FMA dots, mma.py for tensor-core
dots) and mainloops/simt/dots.py hands tensor-core dots to mma.py: kept in either, it would make the two
import each other.
"""

from __future__ import annotations

from compiler import builtins
from compiler.cuda import operands
from compiler.cuda.mainloops.wgmma.mma import CoreTile
from compiler.cuda.values import SharedTile
from compiler.frontend import ir


def staged_operand(gen, arg: ir.Expr):
    """The buffer of a dot operand that is a let (or the transpose of one) staged earlier, or None."""
    name = arg.name if isinstance(arg, ir.Name) else None
    if builtins.is_transpose(arg) and isinstance(arg.args[0], ir.Name):
        name = arg.args[0].name
    v = gen.scope.vals.get(name) if name else None
    return v if isinstance(v, SharedTile | operands.MmaTile | CoreTile) else None
