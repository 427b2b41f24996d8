"""The Cap'n Proto form of a cluster program round-trips exactly."""

from __future__ import annotations

import pytest

from common.errors import UserError
from compiler.cluster.build import compile_cluster
from compiler.cluster.serialize import from_bytes, from_capnp, schema, to_bytes, to_capnp
from tests.cluster.helpers import example, small

CASES = [
    ("add", {"N": 4 * 1048576}),
    ("matmul", {"M": 16384, "N": 8192, "K": 16384}),
    ("matmul_plain", {"M": 1024, "N": 512, "K": 2048}),
    ("flash_attention", {"Nq": 16384, "Nk": 4096}),
]


@pytest.mark.parametrize(("name", "dims"), CASES)
def test_round_trip(name, dims):
    program = compile_cluster(example(name), dims)
    assert from_bytes(to_bytes(program)) == program
    assert from_capnp(to_capnp(program)) == program  # a builder reads like a reader


def test_decoded_regions_are_shared():
    program = from_bytes(to_bytes(compile_cluster(small("flash_attention_small"), {"Nq": 512, "Nk": 64})))
    k_regions = {id(dict(u.launches[0].reads)["K"]) for u in program.units}
    assert len(k_regions) == 1


def test_unknown_format_is_refused():
    msg = to_capnp(compile_cluster(small("add_small"), {"N": 256}))
    msg.format = 99
    data = msg.to_bytes()
    with pytest.raises(UserError, match="format 99"):
        from_bytes(data)


def test_roles_are_an_enum():
    msg = to_capnp(compile_cluster(example("matmul"), {"M": 4096, "N": 4096, "K": 4096}))
    assert [str(t.role) for t in msg.tensors] == ["input", "input", "inout"]
    assert schema().TensorInfo.Role.inout is not None
