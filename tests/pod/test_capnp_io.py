"""Round trips of the runtime's dataclasses through schemas/rpc.capnp."""

from __future__ import annotations

import pytest

from schemas import capnp_io
from schemas.compiled_leaf import CompiledLeaf, KernelLaunch, Scratch, TensorMap, TensorParam
from schemas.instructions import Allocate, Compute, Fetch, Free, Load, NodePlan, Store
from schemas.leaf_io import compiled_leaf_bytes, compiled_leaf_of_bytes
from schemas.program import ClusterProgram, Launch, Leaf, Region, TensorInfo, Unit

LEAF = Leaf(
    name="main", kernel="add", source="kernel add(...) {}\n", dims=(("N", 64),),
    tile_values=(("BLOCK", 16),), grid=(4,), threads=256, tensors=("a", "b", "c"), scalars=(),
    flops=64,
)


def sample_plan() -> NodePlan:
    ra = Region("a", (0, 16), (8, 16))
    rc = Region("c", (64,), (64,))
    return NodePlan(
        node=2, generation=3, peak_bytes=1 << 40,
        instructions=(
            Allocate(id=0, deps=(), buffer=0, shape=(8, 16)),
            Load(id=1, deps=(0,), buffer=0, tensor=0, region=ra),
            Allocate(id=2, deps=(), buffer=1, shape=(8, 16)),
            Fetch(id=3, deps=(2,), buffer=1, peer=1, peer_buffer=7),
            Compute(id=4, deps=(1, 3), leaf="main", bindings=(("a", 0), ("b", 1), ("c", 1)), unit=5),
            Store(id=5, deps=(4,), buffer=1, tensor=1, region=rc, unit=5),
            Free(id=6, deps=(4,), buffer=0, peers=(1, 3)),
            Free(id=7, deps=(5,), buffer=1),
        ),
        uris=("file:///tmp/a.npy", "file:///tmp/c.npy"),
    )


def test_plan_round_trip():
    plan = sample_plan()
    assert capnp_io.plan_from_bytes(capnp_io.plan_to_bytes(plan)) == plan


def test_empty_plan_round_trip():
    plan = NodePlan(node=0, generation=1, instructions=(), peak_bytes=0)
    assert capnp_io.plan_from_bytes(capnp_io.plan_to_bytes(plan)) == plan


def test_program_round_trip_keeps_scalar_kinds_compiled_leaves_and_writes():
    program = capnp_io.JobProgram(
        kernel="add", leaves=(LEAF,), scalars=(("alpha", 1.5), ("n", 3)),
        tensors=(TensorInfo("a", "bf16", (64, 16), "input"), TensorInfo("c", "f32", (64,), "inout")),
        compiled=(("main", COMPILED),), leaf_writes=(("main", ("c",)),),
    )
    back = capnp_io.program_from_bytes(capnp_io.program_to_bytes(program))
    assert back == program
    assert isinstance(back.scalars[1][1], int) and isinstance(back.scalars[0][1], float)
    assert back.writes_of("main") == ("c",)
    assert back.writes_of("step") is None


# every field set, two kernels and a scratch buffer (a split launch's shape)
COMPILED = CompiledLeaf(
    leaf="main", source_hash="ab" * 32, cc=90, code_kind="ptx", code=b".version 8.0\n.entry k0\n.entry k1",
    kernels=(KernelLaunch("k0", (4, 2, 1), (128, 1, 1), 65536, ("a", "part", "alpha"),
                          (TensorMap("a", "a", 64, 16, 64, 16, "u16", (3,)),)),
             KernelLaunch("k1", (1, 1, 1), (32, 1, 1), 0, ("part", "c"))),
    tensors=(TensorParam("a", "bf16", (64, 16)), TensorParam("c", "f32", (64,))),
    scalars=(("alpha", "f32"),), writes=("c",), tuned=(("BLOCK", 64),), schedule="s3-row",
    scratch=(Scratch("part", "f32", (4, 64), zeroed=True),), needs=("bf16",),
)


def test_a_compiled_leaf_round_trips_alone():
    assert compiled_leaf_of_bytes(compiled_leaf_bytes(COMPILED)) == COMPILED


def test_job_program_takes_writes_from_launches():
    region = Region("c", (0,), (64,))
    program = ClusterProgram(
        kernel="add", source="", dims=(("N", 64),), cluster_values=(), tile_values=(),
        super_grid=(1,), tensors=(TensorInfo("c", "f32", (64,), "output"),), scalars=("alpha",),
        leaves=(LEAF,),
        units=(Unit(coord=(0,), index=0,
                    launches=(Launch("main", reads=(("a", region),), writes=(("c", region),)),)),),
    )
    job = capnp_io.job_program(program, {"alpha": 2.0, "unused": 1})
    assert job.scalars == (("alpha", 2.0),)
    assert job.leaf_writes == (("main", ("c",)),)


def test_event_round_trip_maps_none_to_sentinels():
    rpc = capnp_io.rpc()
    for event in (
        capnp_io.InstructionEvent(id=4, kind="compute", start=1.0, end=2.5, unit=3, leaf="step"),
        capnp_io.InstructionEvent(id=9, kind="fetch", start=1.0, end=2.0, bytes=1024, peer=0,
                                  ok=False, message="peer 0 unreachable"),
    ):
        msg = rpc.InstructionEvent.new_message()
        capnp_io.write_event(msg, event)
        assert capnp_io.read_event(msg) == event


def test_pod_info_and_tile_header_round_trip():
    rpc = capnp_io.rpc()
    info = capnp_io.PodInfo("gpu", "NVIDIA H200", 140 << 30, 1234, "host-a", 0, compute_capability=90)
    msg = rpc.PodInfo.new_message()
    capnp_io.write_pod_info(msg, info)
    assert capnp_io.read_pod_info(msg) == info
    with capnp_io.read_message(rpc.PodInfo, msg.to_bytes()) as reader:  # as the bytes arrive
        assert capnp_io.read_pod_info(reader) == info
    header = capnp_io.TileHeader((4, 8), "f32", 128, 0xDEADBEEF, 40123, b"0123456789abcdef")
    msg = rpc.TileHeader.new_message()
    capnp_io.write_tile_header(msg, header)
    assert capnp_io.read_tile_header(msg) == header


OLD_POD_INFO = """@0xd5b1c2a3e4f60718;
struct PodInfo {
  backend @0 :Text;
  deviceName @1 :Text;
  vramBytes @2 :UInt64;
  pid @3 :UInt32;
  hostId @4 :Text;
  deviceIndex @5 :Int32;
}
"""


def test_a_pod_older_than_the_compute_capability_says_none(tmp_path):
    """A hello from a pod built before PodInfo.computeCapability (the struct as it was, written by
    its own schema) reads with the field at 0: the scheduler then compiles for 9.0, as before."""
    import capnp

    schema = tmp_path / "old_rpc.capnp"
    schema.write_text(OLD_POD_INFO)
    old = capnp.load(str(schema))
    msg = old.PodInfo.new_message(backend="gpu", deviceName="NVIDIA H200", vramBytes=80 << 30, pid=7,
                                  hostId="h", deviceIndex=1)
    with capnp_io.read_message(capnp_io.rpc().PodInfo, msg.to_bytes()) as reader:
        info = capnp_io.read_pod_info(reader)
    assert info == capnp_io.PodInfo("gpu", "NVIDIA H200", 80 << 30, 7, "h", 1, compute_capability=0)


def test_bad_scalar_is_refused():
    msg = capnp_io.rpc().Scalar.new_message()
    with pytest.raises(TypeError):
        capnp_io.write_scalar(msg, "flag", True)


def test_oversized_message_is_refused_by_the_traversal_limit():
    source = "x" * (capnp_io.TRAVERSAL_LIMIT_WORDS * 8 + 1024)
    program = capnp_io.JobProgram(kernel="k", leaves=(LEAF.__class__(**{**LEAF.__dict__, "source": source}),),
                                  scalars=(), tensors=())
    data = capnp_io.program_to_bytes(program)
    with pytest.raises(Exception, match="[Tt]raversal|limit"):
        capnp_io.program_from_bytes(data)


def test_one_program_schema_under_rpc_and_job():
    """Regions, tensor infos and leaves are program.capnp's own structs in both other schemas."""
    program = capnp_io.schema("program.capnp")
    rpc = capnp_io.rpc()
    job = capnp_io.schema("job.capnp")
    assert rpc.Program.schema.fields["tensors"].proto.slot.type.list.elementType.struct.typeId == \
        program.TensorInfo.schema.node.id
    assert rpc.LeafCode.schema.fields["leaf"].proto.slot.type.struct.typeId == program.Leaf.schema.node.id
    assert job.Job.schema.fields["dims"].proto.slot.type.list.elementType.struct.typeId == \
        program.NamedValue.schema.node.id


def test_roles_are_an_enum_and_grids_are_64_bit():
    info = TensorInfo("c", "f32", (64,), "inout")
    msg = capnp_io.schema("program.capnp").TensorInfo.new_message()
    capnp_io.write_tensor_info(msg, info)
    assert capnp_io.read_tensor_info(msg) == info
    with pytest.raises(Exception):  # noqa: B017 - pycapnp raises its own KjException
        msg.role = "sideways"
    leaf = Leaf(name="main", kernel="k", source="", dims=(), tile_values=(), grid=(1 << 33, 1, 1),
                threads=128, tensors=(), scalars=())
    msg = capnp_io.schema("program.capnp").Leaf.new_message()
    capnp_io.write_leaf(msg, leaf)
    assert capnp_io.read_leaf(msg) == leaf
