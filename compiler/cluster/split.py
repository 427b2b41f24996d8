"""Splitting a cluster loop over nodes: each unit's chunks are cut into shares, each share reduces
its chunks into its own partial, and the partials are merged by a tree (tree.py).

The units of an unsplit program are the template: an init launch that sets the output's
super-tile (the running sum, or the softmax partial), then one step launch per chunk. Splitting
keeps those launches and rebinds them:

    share k (k = 0 .. S-1)   its init, then the steps of its contiguous range of chunks, all bound
                             to share k's partial instead of the output
    merges                   per round of the tree, (into, source): into's partial combined with
                             source's, by addition or the log-sum-exp rule
    finish (softmax only)    the user's store, from share 0's partial into the output

For the linear accumulator share 0's partial is the output itself (its init applies beta), the
other shares start at 0 and partials add, so the result is beta * C_old + alpha * (sum over all
chunks), the plain kernel's up to the order of f32 additions. Partials live in scratch tensors
(role "partial", never in storage), stacked along axis 0: share k's partial of the output's region
starting at row r lies at row k * rows + r.

Launches keep an order in which every launch's inputs are written first, so running them in order
(compiler/cluster/sequential.py) is one valid schedule; `Launch.share` says which share, one
node's part of the unit, runs each.
"""

from __future__ import annotations

import dataclasses

from common.errors import UserError
from compiler.cluster.tree import SplitRequest, share_chunks, tree_rounds
from schemas.program import Launch, Reduction, Region, TensorInfo, Unit


@dataclasses.dataclass(frozen=True)
class Partials:
    """How share k's partial is named and placed: `params` (leaf parameter -> tensor) for shares
    other than 0, and for share 0 (the sum's root is the output itself)."""

    form: str  # "sum" or "softmax"
    out: TensorInfo
    params: tuple[tuple[str, str], ...]  # parameter -> partial tensor (scratch)
    other: tuple[str, ...]  # the merge leaf's parameters for the source share, same order
    shares: int

    def tensors(self) -> tuple[TensorInfo, ...]:
        copies = self.shares - 1 if self.form == "sum" else self.shares
        if copies == 0:
            return ()
        rows = (copies * self.out.shape[0],)
        out = []
        for param, tensor in self.params:
            shape = self.out.shape[1:] if self._full(param) else self.out.shape[1:-1]
            out.append(
                TensorInfo(tensor, self.out.dtype if self.form == "sum" else "f32", rows + shape, "partial")
            )
        return tuple(out)

    def _full(self, param: str) -> bool:
        """Whether the partial has the output's rank (acc, or the sum's) or one less (m, l)."""
        return self.form == "sum" or param == self.params[-1][0]

    def regions(self, share: int, out_region: Region) -> tuple[tuple[str, Region], ...]:
        if self.form == "sum" and share == 0:
            return ((self.params[0][0], out_region),)
        copy = share - 1 if self.form == "sum" else share
        out = []
        for param, tensor in self.params:
            start = (copy * self.out.shape[0] + out_region.start[0], *out_region.start[1:])
            shape = out_region.shape
            if not self._full(param):
                start, shape = start[:-1], shape[:-1]
            out.append((param, Region(tensor, start, shape)))
        return tuple(out)


def _rebind_step(
    step: Launch, out: str, partial: tuple[tuple[str, Region], ...], share: int, form: str
) -> Launch:
    if form == "sum":  # the step leaf's output parameter now holds this share's running sum
        region = partial[0][1]
        reads = tuple((p, region if r.tensor == out else r) for p, r in step.reads)
        writes = tuple((p, region if r.tensor == out else r) for p, r in step.writes)
        return Launch(step.leaf, reads, writes, share)
    reads = tuple((p, r) for p, r in step.reads if r.tensor != out) + partial
    return Launch(step.leaf, reads, partial, share)


def split_unit(unit: Unit, out: str, partials: Partials, rounds, zero: str | None, variant) -> Unit:
    """`unit` (init, then one step per chunk, all on the output's region) split into shares.
    `zero` is the leaf that starts the sum's other shares at 0 (None: the init leaf does);
    `variant(base, region)` names a generated leaf at the output region's extents."""
    init, steps = unit.launches[0], unit.launches[1:]
    out_region = next(r for _, r in init.writes if r.tensor == out)
    form = partials.form
    other_init = init.leaf if zero is None else variant(zero, out_region)
    launches: list[Launch] = []
    for share, chunks in enumerate(share_chunks(len(steps), partials.shares)):
        partial = partials.regions(share, out_region)
        if form == "sum" and share == 0:
            launches.append(init)
        else:
            launches.append(Launch(other_init if form == "sum" else init.leaf, (), partial, share))
        launches.extend(_rebind_step(steps[k], out, partial, share, form) for k in chunks)
    merge = variant("merge", out_region) if rounds else ""
    for merges in rounds:
        for into, source in merges:
            mine, theirs = partials.regions(into, out_region), partials.regions(source, out_region)
            theirs = tuple((p, r) for p, (_, r) in zip(partials.other, theirs, strict=True))
            launches.append(Launch(merge, mine + theirs, mine, into))
    if form == "softmax":
        finish = variant("finish", out_region)
        launches.append(Launch(finish, partials.regions(0, out_region), ((out, out_region),), 0))
    return dataclasses.replace(unit, launches=tuple(launches))


def reduction_of(form: str, request: SplitRequest) -> Reduction:
    return Reduction(form, request.shares, request.shape, request.hosts, tree_rounds(request))


def check_shares(request: SplitRequest, chunks: int) -> None:
    if request.shares > chunks:
        raise UserError(
            f"cannot split {chunks} chunk(s) of the cluster loop over {request.shares} shares: "
            "choose a smaller split or a smaller @cluster step"
        )
