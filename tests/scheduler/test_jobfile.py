"""new-job / show-job: building, checking, writing and reading job files."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import UserError
from scheduler import cli
from scheduler.jobs.jobfile import (
    Job,
    build_job,
    job_from_bytes,
    job_to_bytes,
    parse_uri,
    read_job,
    render_job,
    resolve_uri,
    write_job,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MATMUL = EXAMPLES / "matmul.phk"
TENSORS = {"A": "file:a.npy", "B": "file:///data/b.npy", "C": "file:out/c.npy"}


def matmul_job(**over) -> Job:
    args = dict(dims={"M": 64, "N": 64, "K": 32}, scalars={"alpha": 1.0, "beta": 0.5}, tensors=TENSORS)
    args.update(over)
    return build_job(MATMUL, None, **args)


def test_round_trip_through_bytes_and_file(tmp_path):
    job = matmul_job(cluster_values={"TILE_M": 8192})
    assert job_from_bytes(job_to_bytes(job)) == job
    path = tmp_path / "j.capnp"
    write_job(job, path)
    assert read_job(path) == job
    assert job.kernel_name == "matmul" and "kernel matmul" in job.kernel_source
    assert [p.name for p in tmp_path.iterdir()] == ["j.capnp"]  # no temp file left behind


@pytest.mark.parametrize("over, words", [
    ({"dims": {"M": 64, "N": 64}}, "missing dimension K of kernel matmul: give --dim K=..."),
    ({"dims": {"M": 64, "N": 64, "K": 32, "Q": 1}}, "no dimension Q"),
    ({"dims": {"M": 0, "N": 64, "K": 32}}, "M = 0 must be at least 1"),
    ({"scalars": {"alpha": 1.0}}, "missing --scalar for beta"),
    ({"scalars": {"alpha": 1.0, "beta": 1.0, "gamma": 2.0}}, "no scalar gamma"),
    ({"tensors": {"A": "file:a.npy", "B": "file:b.npy"}}, "missing --tensor for C"),
    ({"tensors": {**TENSORS, "D": "file:d.npy"}}, "no tensor D"),
    ({"tensors": {**TENSORS, "A": "s3://bucket/a.npy"}}, "only file: URIs"),
    ({"tensors": {**TENSORS, "A": "file://otherhost/a.npy"}}, "remote host"),
    ({"tensors": {**TENSORS, "A": "file:a.csv"}}, "expected a .npy file"),
    ({"tensors": {**TENSORS, "A": "a.npy"}}, "only file: URIs"),
    ({"cluster_values": {"TILE_M": 0}}, "--cluster TILE_M=0: must be at least 1"),
    ({"cluster_values": {"TILE_Q": 4096}}, "no @cluster name TILE_Q"),
    ({"tile_values": {"TILE_Q": 4}}, "--tile TILE_Q: kernel matmul has no @autotune name TILE_Q"),
])
def test_bad_jobs_are_refused_with_one_line(over, words):
    with pytest.raises(UserError) as err:
        matmul_job(**over)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_dims_fixed_by_autotune_are_optional():
    job = build_job(EXAMPLES / "flash_attention.phk", None, dims={"Nq": 256, "Nk": 128},
                    scalars={"scale": 0.125},
                    tensors={t: f"file:{t}.npy" for t in ("Q", "K", "V", "O")})
    assert dict(job.dims) == {"Nq": 256, "Nk": 128}


def test_kernel_errors_point_at_the_source(tmp_path):
    bad = tmp_path / "bad.phk"
    bad.write_text("kernel k(a: tensor<f32>[N]) {\n  a[0 :+ 4] = nope\n}\n")
    with pytest.raises(UserError) as err:
        build_job(bad, None, {"N": 4}, {}, {"a": "file:a.npy"})
    assert f"{bad}:2:" in err.value.render()


def test_uris():
    assert parse_uri("file:///x/a.npy").relative is False
    assert parse_uri("file://localhost/x/a.npy").path == "/x/a.npy"
    assert parse_uri("file:data/a%20b.npy").path == "data/a b.npy"
    assert resolve_uri("file:data/a.npy", Path("/jobs")) == "file:///jobs/data/a.npy"
    assert resolve_uri("file:../a.npy", Path("/jobs/x")) == "file:///jobs/a.npy"
    assert resolve_uri("file:///abs/a.npy", Path("/jobs")) == "file:///abs/a.npy"
    for bad in ("http://x/a.npy", "file:", "file:///dir/", "file:///a.npy?x=1"):
        with pytest.raises(UserError):
            parse_uri(bad)


def test_garbage_job_file_is_a_user_error(tmp_path):
    path = tmp_path / "j.capnp"
    path.write_bytes(b"\x07" * 40)
    with pytest.raises(UserError, match="not a valid job file"):
        read_job(path)
    with pytest.raises(UserError, match="cannot read job file"):
        read_job(tmp_path / "missing.capnp")


def test_cli_new_job_and_show_job(tmp_path, capsys):
    out = tmp_path / "job.capnp"
    code = cli.main(["new-job", str(MATMUL), "--dim", "M=64", "--dim", "N=64", "--dim", "K=32",
                     "--scalar", "alpha=2", "--scalar", "beta=0", "--tensor", "A=file:a.npy",
                     "--tensor", "B=file:b.npy", "--tensor", "C=file:c.npy", "-o", str(out)])
    assert code == 0 and out.exists()
    capsys.readouterr()
    assert cli.main(["show-job", str(out)]) == 0
    text = capsys.readouterr().out
    assert "kernel   matmul" in text and "M=64" in text and "alpha=2" in text
    assert f"file:a.npy  -> file://{tmp_path}/a.npy" in text
    assert "| kernel matmul(" in text
    assert render_job(read_job(out)).startswith("job\n")


# job.capnp before its dimensions became program.capnp's NamedValue (the same layout: a job file
# written then reads the same now). Its file id differs from today's: Cap'n Proto refuses to load
# two files with one id into a process, and ids never reach the wire.
OLD_JOB_SCHEMA = """@0xd1c3a5b7e9f10203;
struct Job {
  format @0 :UInt32 = 1;
  kernelName @1 :Text;
  kernelSource @2 :Text;
  kernelFile @3 :Text;
  dims @4 :List(Dim);
  scalars @5 :List(Scalar);
  tensors @6 :List(Tensor);
  clusterValues @7 :List(Dim);
  struct Dim { name @0 :Text; value @1 :Int64; }
  struct Scalar { name @0 :Text; value @1 :Float64; }
  struct Tensor { name @0 :Text; uri @1 :Text; }
}
"""


@pytest.fixture(scope="module")
def old_job_schema(tmp_path_factory):
    """Loaded once: Cap'n Proto also refuses one file id loaded from two paths."""
    import capnp

    folder = tmp_path_factory.mktemp("old-schema")
    (folder / "job.capnp").write_text(OLD_JOB_SCHEMA)
    return capnp.load(str(folder / "job.capnp"))


def _old_job_bytes(schema, job: Job, format_: int = 1) -> bytes:
    msg = schema.Job.new_message()
    msg.format, msg.kernelName, msg.kernelSource, msg.kernelFile = (
        format_, job.kernel_name, job.kernel_source, job.kernel_file)
    for field, items in (("dims", job.dims), ("clusterValues", job.cluster_values)):
        for entry, (name, value) in zip(msg.init(field, len(items)), items, strict=True):
            entry.name, entry.value = name, value
    for entry, (name, value) in zip(msg.init("scalars", len(job.scalars)), job.scalars, strict=True):
        entry.name, entry.value = name, value
    for entry, (name, uri) in zip(msg.init("tensors", len(job.tensors)), job.tensors, strict=True):
        entry.name, entry.uri = name, uri
    return msg.to_bytes()


def test_a_job_file_of_the_old_schema_reads_the_same(old_job_schema):
    job = matmul_job(cluster_values={"TILE_M": 8192})
    assert job_from_bytes(_old_job_bytes(old_job_schema, job)) == job


def test_a_job_file_of_another_format_names_the_versions(old_job_schema):
    data = _old_job_bytes(old_job_schema, matmul_job(), format_=7)
    with pytest.raises(UserError, match=r"job format 7 is not supported \(expected 1\)"):
        job_from_bytes(data, "j.capnp")


SHIFT = """@cluster(BLOCK in [64, 256])
@autotune(BLOCK in [16, 64])
kernel shift(a: tensor<i32>[N], c: tensor<i32>[N], k: i32) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + k
}
"""


@pytest.mark.parametrize("k, words", [(2.5, "scalar k = 2.5 must be an integer (it is i32)"),
                                      (2**31, "scalar k = 2147483648 does not fit in i32")])
def test_an_i32_scalar_takes_a_whole_number_that_fits(tmp_path, k, words):
    """The rule the interpreter and every launch apply too (binding.scalar_value)."""
    path = tmp_path / "shift.phk"
    path.write_text(SHIFT)
    tensors = {"a": "file:a.npy", "c": "file:c.npy"}
    job = build_job(path, None, dims={"N": 256}, scalars={"k": -(2**31)}, tensors=tensors)
    assert dict(job.scalars) == {"k": -(2**31)}
    with pytest.raises(UserError) as err:
        build_job(path, None, dims={"N": 256}, scalars={"k": k}, tensors=tensors)
    assert str(err.value) == words
