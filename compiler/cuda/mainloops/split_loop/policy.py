"""The split-loop (flash-decoding, split-K): the leaf's one top-level loop, whose state is
associative, cut over `factor` CTAs along a free grid axis (compiler/cuda/mainloops/split_loop/transform.py),
a partial kernel leaving each chunk's state in scratch, a tree of merge kernels over many CTAs
(compiler/cuda/mainloops/split_loop/tree.py) and a combine kernel merging what is left and running the user's
store, all with the one merge description the cluster shares (compiler/cluster/partial_leaves.py).

It is the policy of the launch sequence, not of a loop's operand ring: each of its kernels takes
its own ring policy (the others of this package) as any leaf does. `forced`: the user asked
for the factor (--split N, phobos `split=`); otherwise the cost model chose it (mainloops/split_loop/plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda.mainloops.base import Mainloop


@dataclass(frozen=True)
class SplitLoop(Mainloop):
    factor: int = 1
    forced: bool = False

    name = "split-loop"
