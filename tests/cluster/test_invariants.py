"""Invariants of every cluster program over the whole @cluster search space: regions lie inside
their tensors, units' output regions tile each output exactly once, and the chunks of a cluster
loop cover its dimension exactly once per unit."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cluster.build import cluster_space, compile_cluster
from compiler.frontend.diagnostics import CompileError
from tests.cluster.helpers import example, small

CASES = [
    (small("add_small"), {"N": 1024}),
    (small("matmul_small"), {"M": 128, "N": 64, "K": 128}),
    (small("matmul_plain_small"), {"M": 64, "N": 128, "K": 64}),
    (small("flash_attention_small"), {"Nq": 256, "Nk": 40}),
    (small("layernorm_small"), {"R": 32, "C": 100}),
]


def _check(program) -> None:
    shapes = {t.name: t.shape for t in program.tensors}
    written = {t.name: np.zeros(t.shape, np.int32) for t in program.tensors if t.role != "input"}
    assert [u.index for u in program.units] == list(range(len(program.units)))
    assert len(program.units) == int(np.prod(program.super_grid))
    for unit in program.units:
        assert all(0 <= c < n for c, n in zip(unit.coord, program.super_grid, strict=True))
        unit_writes = set()
        for launch in unit.launches:
            for _, region in (*launch.reads, *launch.writes):
                shape = shapes[region.tensor]
                assert all(
                    0 <= s and s + n <= d for s, n, d in zip(region.start, region.shape, shape, strict=True)
                )
            unit_writes |= {r for _, r in launch.writes}
        for region in unit_writes:
            box = tuple(slice(s, s + n) for s, n in zip(region.start, region.shape, strict=True))
            written[region.tensor][box] += 1
    for name, count in written.items():
        assert (count == 1).all(), f"{name} is not written exactly once by the units"


@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_point_of_the_search_space(case):
    kernel, dims = CASES[case]
    for values in cluster_space(kernel):
        try:
            program = compile_cluster(kernel, dims, cluster_values=values)
        except CompileError as err:  # only dims that are not multiples of this super-tile may fail
            assert "is not a whole multiple" in err.message, err.render()
            continue
        _check(program)


def test_chunks_cover_k_once_per_unit():
    program = compile_cluster(
        small("matmul_small"), {"M": 64, "N": 64, "K": 128}, cluster_values={"TILE_K": 32}
    )
    for unit in program.units:
        steps = [dict(launch.reads)["A"] for launch in unit.launches if launch.leaf == "step"]
        assert sorted(r.start[1] for r in steps) == [0, 32, 64, 96]
        assert all(r.shape[1] == 32 for r in steps)


def test_matmul_step_flops_are_counted_exactly():
    step = compile_cluster(example("matmul"), {"M": 4096, "N": 4096, "K": 4096}).leaf("step")
    ctas, trips = 128 * 128, 4096 // 4
    per_iteration = 2 * 32 * 32 * 4 + 32 * 32  # the dot of a 32x4 by a 4x32 tile, then acc +=
    epilogue = 2 * 32 * 32  # alpha * acc, then + c_old
    assert step.flops == ctas * (trips * per_iteration + epilogue)
