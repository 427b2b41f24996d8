"""A program's units as columns (schemas/units.py): the columns say what the objects say,
a subset taken in columns equals the columns of the subset's objects, and the program still reads
as its sequence of Units everywhere else."""

from __future__ import annotations

import dataclasses
import gc
from types import SimpleNamespace

import numpy as np
import pytest

from compiler.cluster.build import compile_cluster
from compiler.cluster.tree import SplitRequest
from scheduler.planning.planner import NodeFigure, plan
from scheduler.running.cluster_state import ClusterState, Submit, describe_instructions
from scheduler.tracing.tracefile import TraceRecorder
from schemas.units import Launch, Region, Unit, UnitColumns
from tests.cluster.helpers import small
from tests.scheduler.programs import matmul_program, uris_of

TILES = {"TILE_M": 64, "TILE_N": 64, "TILE_K": 64}

COLUMNS = ("unit_index", "launch_start", "share", "access_start", "write", "ndim", "start", "shape")


def _same(a: UnitColumns, b: UnitColumns) -> None:
    assert a.units == b.units
    widest = int(a.ndim.max(initial=0))  # a subset may keep its program's wider padding
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        if name in ("start", "shape"):
            x, y = x[:, :widest], y[:, :widest]
        assert np.array_equal(x, y), name
    for name in ("leaf", "param", "tensor"):  # numbers into `names`: the names they stand for
        x, y = getattr(a, name).tolist(), getattr(b, name).tolist()
        assert [a.names[i] for i in x] == [b.names[i] for i in y], name


def _decoded(units: UnitColumns) -> list:
    """The units back from the columns alone: per unit, per launch (leaf, share, reads, writes)."""
    out = []
    for u in range(len(units)):
        launches = []
        for la in range(units.launch_start[u], units.launch_start[u + 1]):
            accesses = [(units.names[units.param[a]], bool(units.write[a]),
                         Region(units.names[units.tensor[a]], tuple(units.start[a, :units.ndim[a]].tolist()),
                                tuple(units.shape[a, :units.ndim[a]].tolist())))
                        for a in range(units.access_start[la], units.access_start[la + 1])]
            reads = tuple((p, r) for p, w, r in accesses if not w)
            writes = tuple((p, r) for p, w, r in accesses if w)
            launches.append(Launch(units.names[units.leaf[la]], reads, writes, int(units.share[la])))
        out.append(Unit(units[u].coord, int(units.unit_index[u]), tuple(launches)))
    return out


def test_columns_say_what_the_objects_say():
    program = matmul_program(64, 48, 48, 16, 16, 16)
    assert isinstance(program.units, UnitColumns)
    assert _decoded(program.units) == list(program.units)


def test_regions_of_several_ranks_and_shares():
    a, v = Region("a", (3,), (5,)), Region("v", (0, 2, 4), (1, 2, 3))
    step = Launch("step", (("x", v), ("out", a)), (("out", a),), share=2)
    units = [Unit((0,), 5, (Launch("init", (), (("out", a),)), step)),
             Unit((1,), 2, ()),
             Unit((2,), 9, (Launch("step", (("x", Region("s", (), ())),), (("out", v),), share=1),))]
    columns = UnitColumns.from_units(units)
    assert _decoded(columns) == units
    assert columns.ndim.tolist() == [1, 3, 1, 1, 0, 3] and columns.start.shape == (6, 3)


def test_a_subset_taken_in_columns_is_the_subset_walked():
    program = matmul_program(64, 48, 48, 16, 16, 16)
    units = program.units
    for positions in ([], [3], [11, 0, 5, 5, 2], list(range(len(units)))[::-2]):
        walked = UnitColumns.from_units([units[i] for i in positions])
        _same(units.take(np.array(positions, np.int64)), walked)
    _same(units[2:9:3], UnitColumns.from_units(tuple(units)[2:9:3]))


def test_units_of_the_program_are_taken_and_others_walked():
    units = matmul_program(64, 48, 48, 16, 16, 16).units
    chosen = [units[7], units[1], units[4]]
    taken = units.take_units(chosen)
    assert taken.units == tuple(chosen) and all(a is b for a, b in zip(taken, chosen, strict=True))
    stranger = dataclasses.replace(units[1], launches=units[1].launches[:1])  # same index, other unit
    walked = units.take_units([units[7], stranger])
    _same(walked, UnitColumns.from_units([units[7], stranger]))


def test_the_program_still_reads_as_its_units():
    program = matmul_program(64, 48, 48, 16, 16, 16)
    again = matmul_program(64, 48, 48, 16, 16, 16)
    assert program == again and hash(program) == hash(again)
    assert program.units == tuple(program.units) and list(program.units) == list(again.units)
    fewer = dataclasses.replace(program, units=program.units[:3])
    assert isinstance(fewer.units, UnitColumns) and list(fewer.units) == list(program.units)[:3]
    assert program.units[-1] is tuple(program.units)[-1]


def test_a_region_whose_start_and_shape_disagree_is_refused():
    with pytest.raises(ValueError, match="start and shape"):
        UnitColumns.from_units([Unit((0,), 0, (Launch("main", (("x", Region("x", (0, 0), (4,))),), ()),))])


@pytest.mark.parametrize("name, dims, values, split", [
    ("matmul_small", {"M": 144, "N": 176, "K": 80}, TILES, None),  # ragged on every axis
    ("matmul_plain_small", {"M": 150, "N": 97, "K": 70}, TILES, None),
    ("matmul_small", {"M": 144, "N": 176, "K": 560}, TILES, SplitRequest(3, "binary")),
    ("flash_attention_small", {"Nq": 500, "Nk": 333}, {"BR": 32}, None),
    ("layernorm_small", {"R": 40, "C": 300}, {"BR": 4}, None),
    ("add_small", {"N": 1000}, {}, None),
])
def test_the_compilers_columns_are_its_units_walked(name, dims, values, split):
    """The cluster compiler makes a grid's units as columns and their objects from them: walking
    those objects gives the same columns back (so a plan is the same from either)."""
    units = compile_cluster(small(name), dims, cluster_values=values, split=split).units
    made = list(units)
    _same(units, UnitColumns.from_units(made))
    assert _decoded(units) == made
    assert units[len(units) - 1] is made[-1] and units[0] is made[0]  # made once, then kept


def _box(tensor: str, *axes: tuple[int, int, int]) -> Region:
    """The region of `tensor` at tile index i of each axis given as (i, tile, size)."""
    return Region(tensor, tuple(i * tile for i, tile, _ in axes),
                  tuple(min(tile, size - i * tile) for i, tile, size in axes))


def test_the_compilers_regions_and_leaves_are_the_grid_worked_by_hand():
    """Not a round trip: a ragged 150x97x70 matmul in 64-tiles (3x2 units, 2 chunks of K, the
    last of each axis 22, 33 and 6 wide), its units written out from the tiling itself. A wrong
    region template (start, extent, ragged last tile or axis) or leaf variant fails here."""
    dims = {"M": 150, "N": 97, "K": 70}
    units = compile_cluster(small("matmul_plain_small"), dims, cluster_values=TILES).units
    expected = []
    for i, j in [(i, j) for i in range(3) for j in range(2)]:
        edge = ",".join([*(["M=22"] if i == 2 else []), *(["N=33"] if j == 1 else [])])
        c = _box("C", (i, 64, 150), (j, 64, 97))
        launches = [Launch("init" + (f"@{edge}" if edge else ""), (), (("C", c),))]
        for k in range(2):
            last = ",".join(filter(None, [edge, "K=6" if k == 1 else ""]))
            reads = (("A", _box("A", (i, 64, 150), (k, 64, 70))), ("B", _box("B", (k, 64, 70), (j, 64, 97))),
                     ("C", c))
            launches.append(Launch("step" + (f"@{last}" if last else ""), reads, (("C", c),)))
        expected.append(Unit((i, j), 2 * i + j, tuple(launches)))
    assert list(units) == expected
    _same(units, UnitColumns.from_units(expected))


def _writes_per_unit_walked(units, skip: set[str]) -> dict[int, int]:
    return {u.index: len({r for la in u.launches for _, r in la.writes if r.tensor not in skip})
            for u in units}


def _first_writes_walked(units) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for unit in units:
        for launch in unit.launches:
            out.setdefault(launch.leaf, [p for p, _ in launch.writes])
    return out


@pytest.mark.parametrize("name, dims, values, split", [
    ("matmul_small", {"M": 144, "N": 176, "K": 560}, TILES, SplitRequest(3, "binary")),
    ("flash_attention_small", {"Nq": 500, "Nk": 333}, {"BR": 32}, SplitRequest(2, "flat")),
    ("matmul_plain_small", {"M": 150, "N": 97, "K": 70}, TILES, None),
])
def test_what_the_scheduler_reads_of_the_units_is_what_their_objects_say(name, dims, values, split):
    """The stores a unit makes (cluster_state) and the parameters each leaf writes (job_program),
    from the columns, against a walk over the objects."""
    program = compile_cluster(small(name), dims, cluster_values=values, split=split)
    scratch = {t.name for t in program.tensors if t.role == "partial"}
    for skip in (scratch, set()):
        assert program.units.writes_per_unit(skip) == _writes_per_unit_walked(program.units, skip)
    assert program.units.first_writes() == _first_writes_walked(program.units)
    some = program.units.take(np.array([len(program.units) - 1, 0], np.int64))
    assert some.writes_per_unit(scratch) == _writes_per_unit_walked(some, scratch)


def _outputs_walked(unit: Unit) -> tuple:
    written = dict.fromkeys(r for la in unit.launches for _, r in la.writes)
    return unit.coord, [(r.tensor, list(r.start), list(r.shape)) for r in written]


@pytest.mark.parametrize("name, dims, values, split", [
    ("matmul_small", {"M": 144, "N": 176, "K": 560}, TILES, SplitRequest(3, "binary")),  # from objects
    ("flash_attention_small", {"Nq": 500, "Nk": 333}, {"BR": 32}, None),
    ("matmul_plain_small", {"M": 150, "N": 97, "K": 70}, TILES, None),
])
def test_each_units_outputs_are_what_its_objects_write(name, dims, values, split):
    """What the trace records of a unit (its coordinate and written regions, partials too),
    from the columns, for units asked for in any order, against a walk over their objects."""
    program = compile_cluster(small(name), dims, cluster_values=values, split=split)
    units = program.units
    indices = [u.index for u in units][::-3]
    assert units.unit_outputs(indices) == [_outputs_walked(u) for u in units if u.index in indices][::-1]
    some = units.take(np.array([3, 0, 1], np.int64))
    assert some.unit_outputs([units[1].index]) == [_outputs_walked(units[1])]
    for stranger in (units[2].index, max(u.index for u in units) + 1, -1):
        with pytest.raises(KeyError):
            some.unit_outputs([stranger])
    none = some.take(np.array([], np.int64))
    assert some.unit_outputs([]) == [] and none.unit_outputs([]) == []
    with pytest.raises(KeyError):
        none.unit_outputs([0])


def test_the_trace_records_a_compiled_programs_units_without_their_objects():
    """The trace's records of a job's units (from the columns) and of its events (their units
    from the scheduler's description of the instructions, not a second one of its own)."""
    program = compile_cluster(small("matmul_small"), {"M": 144, "N": 176, "K": 80}, cluster_values=TILES)
    uris = uris_of(program)

    def planner(figures, generation, units, first_id):
        return plan(program, figures, uris, generation, units, first_id)

    state = ClusterState(program, {0: NodeFigure(0), 1: NodeFigure(1)}, planner)
    recorder = TraceRecorder(dataclasses.make_dataclass("Prepared", ["program"])(program))
    for action in reversed(state.start(0.0)):
        recorder.add_plan(state.plans[action.plan.generation], action.node, state.instruction_info)
    whole = state.plan
    assert program.units.objects == [None] * len(program.units)
    for node, node_plan in whole.node_plans.items():
        described = describe_instructions(node_plan)
        for ins in node_plan.instructions:  # a pod names the unit of its computes and stores only
            event = SimpleNamespace(id=ins.id, kind=described[ins.id].kind, start=1.0, end=2.0, bytes=0,
                                    peer=None, unit=getattr(ins, "unit", None), leaf=None, ok=True, copy_s=0,
                                    message="")
            recorder.add_event(node, 1, event, 0.0)
            assert recorder.events[-1]["unit"] == described[ins.id].unit is not None
    by_unit = {u["unit"]: u for u in recorder.units}
    assert sorted(by_unit) == [u.index for u in program.units]
    for unit in program.units:
        coord, outputs = _outputs_walked(unit)
        assert by_unit[unit.index] == {
            "unit": unit.index, "coord": list(coord), "node": whole.placement[unit.index], "generation": 1,
            "outputs": [{"tensor": t, "start": start, "shape": shape} for t, start, shape in outputs]}


def test_written_regions_of_a_tensor_are_the_objects_written():
    program = compile_cluster(small("matmul_small"), {"M": 144, "N": 176, "K": 560}, cluster_values=TILES,
                              split=SplitRequest(3, "binary"))
    ranks = {t.name: len(t.shape) for t in program.tensors} | {"nothing": 3}
    for tensor, rank in ranks.items():
        seen: dict = {}
        for unit in program.units:
            for launch in unit.launches:
                for _, region in launch.writes:
                    if region.tensor == tensor:
                        seen.setdefault(region, region)
        start, shape = program.units.written(tensor, rank)
        assert start.shape == shape.shape == (len(seen), rank)
        pairs = zip(start.tolist(), shape.tolist(), strict=True)
        assert [Region(tensor, tuple(a), tuple(b)) for a, b in pairs] == list(seen)
    output = next(t.name for t in program.tensors if t.role in ("output", "inout"))
    with pytest.raises(ValueError, match="other than its 3 axes"):
        program.units.written(output, 3)


def test_a_compiled_programs_job_makes_only_the_moved_units_objects():
    """The scheduler's state machine plans a compiled program from its columns: starting the job
    makes no `Unit` object (a million-unit program's would cost seconds and hundreds of MB), and
    a re-plan after a node dies makes only the moved units'."""
    program = compile_cluster(small("add_small"), {"N": 1000}, cluster_values={"BLOCK": 64})
    uris = uris_of(program)

    def planner(figures, generation, units, first_id):
        return plan(program, figures, uris, generation, units, first_id)

    state = ClusterState(program, {i: NodeFigure(i) for i in range(3)}, planner, heartbeat_timeout=5.0)
    assert [type(a) for a in state.start(0.0)] == [Submit] * 3
    assert len(program.units) == 16 and program.units.objects == [None] * 16
    moved = sorted(u for u, node in state.plan.placement.items() if node == 1)
    actions = state.disconnected(1, "connection lost", 0.1)
    assert sorted(u for u, _, _ in state.replans[-1].moved) == moved
    assert any(isinstance(a, Submit) for a in actions)
    made = [u.index for u in program.units.objects if u is not None]
    assert made == moved


@pytest.mark.parametrize("name, dims, values", [
    ("matmul_small", {"M": 144, "N": 176, "K": 80}, TILES),
    ("add_small", {"N": 100_000}, {"BLOCK": 64}),  # 4689 accesses: several blocks of keys
])
def test_keys_of_units_made_and_not_are_their_regions_one_object_each(name, dims, values):
    """The planner's keys (`regions`) over a compiled program whose units are partly made: the
    made units' own objects, and for the rest regions made from the columns, which the units
    made after hand out again (one object per region, whichever came first)."""
    units = compile_cluster(small(name), dims, cluster_values=values).units
    early = [units[i] for i in (0, 5)]  # made before the keys are read
    everything = np.arange(int(units.access_start[-1]), dtype=np.int64)
    regions = units.regions(np.random.default_rng(5).permutation(everything))
    keys = [None] * len(everything)
    for i in np.random.default_rng(6).permutation(len(everything)).tolist():  # blocks in any order
        keys[regions.accesses[i]] = regions[i]
    walked = [r for u in units for la in u.launches for _, r in (*la.reads, *la.writes)]
    assert keys == walked and all(a is b for a, b in zip(keys, walked, strict=True))
    assert len({id(r) for r in walked}) == len(set(walked))  # equal regions: one object
    assert early[1] is units[5]


def test_units_are_made_from_the_columns_without_cycle_collections():
    """Making a compiled program's Unit objects allocates millions of acyclic tuples: the cycle
    collector, left on, would run every few hundred (2.2 times the CPU for 300k add units); it is
    held off while a block is made, and left as it was."""
    units = compile_cluster(small("add_small"), {"N": 20_000 * 64}, cluster_values={"BLOCK": 64}).units
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    assert gc.isenabled()
    gc.callbacks.append(count)
    try:
        made = list(units)
    finally:
        gc.callbacks.remove(count)
    # at most one young collection after each block of 4096 (the allocations made while held
    # off are counted); left on, the collector ran about 800 times here
    assert len(made) == 20_000 and len(collections) <= 20_000 // 4096 + 1 and gc.isenabled()
