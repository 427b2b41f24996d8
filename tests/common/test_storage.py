"""common/storage.py with real .npy files: URIs, confinement, region reads, staging and commit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from common import storage
from common import uri as uris
from common.errors import UserError
from schemas.program import Region

REPO = Path(__file__).resolve().parents[2]
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32}


# ---- URIs and confinement ---------------------------------------------------------------------


def test_resolve_uri_accepts_file_uris_inside_a_root(tmp_path):
    target = tmp_path / "data" / "a.npy"
    target.parent.mkdir()
    for uri in (target.as_uri(), f"file://localhost{target}", f"file:{target}"):
        assert uris.confine(uri, [tmp_path]) == target.resolve()


def test_resolve_uri_decodes_percent_escapes(tmp_path):
    target = tmp_path / "a b.npy"
    assert uris.confine(target.as_uri(), [tmp_path]) == target.resolve()


def test_relative_uri_needs_a_base(tmp_path):
    got = uris.confine("file:data/a.npy", [tmp_path], base=tmp_path)
    assert got == (tmp_path / "data/a.npy").resolve()
    with pytest.raises(UserError, match="relative"):
        uris.confine("file:data/a.npy", [tmp_path])


@pytest.mark.parametrize("uri,reason", [
    ("s3://bucket/a.npy", "only file: URIs"),
    ("http://host/a.npy", "only file: URIs"),
    ("/plain/path.npy", "only file: URIs"),
    ("file://otherhost/a.npy", "remote host"),
    ("file:///x/a.npy?x=1", "query"),
])
def test_other_schemes_and_hosts_are_refused(tmp_path, uri, reason):
    with pytest.raises(UserError, match=reason):
        uris.confine(uri, [tmp_path])


def test_dotdot_is_refused_even_when_it_stays_inside(tmp_path):
    (tmp_path / "sub").mkdir()
    for uri in (f"file://{tmp_path}/sub/../a.npy", f"file://{tmp_path}/sub/%2e%2e/a.npy",
                f"file://{tmp_path}/../etc/passwd"):
        with pytest.raises(UserError, match=r"'\.\.'"):
            uris.confine(uri, [tmp_path])


def test_paths_outside_every_root_are_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(UserError, match="outside the storage roots"):
        uris.confine((tmp_path / "elsewhere.npy").as_uri(), [root])
    with pytest.raises(UserError, match="outside the storage roots"):
        uris.confine(Path("/etc/passwd").as_uri(), [root])


def test_symlink_leading_out_is_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    np.save(outside / "secret.npy", np.zeros(3, np.float32))
    (root / "link.npy").symlink_to(outside / "secret.npy")
    (root / "dirlink").symlink_to(outside)
    with pytest.raises(UserError, match="outside"):
        uris.confine((root / "link.npy").as_uri(), [root])
    with pytest.raises(UserError, match="outside"):
        uris.confine((root / "dirlink" / "secret.npy").as_uri(), [root])
    # a symlink that stays inside the root is fine
    np.save(root / "real.npy", np.zeros(3, np.float32))
    (root / "inner.npy").symlink_to(root / "real.npy")
    assert uris.confine((root / "inner.npy").as_uri(), [root]) == (root / "real.npy").resolve()


def test_several_roots(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert uris.confine((b / "x.npy").as_uri(), [a, b]) == (b / "x.npy").resolve()


# ---- metadata and region reads -----------------------------------------------------------------


def _make(path: Path, shape, dtype: str, rng) -> np.ndarray:
    if dtype == "i32":
        values = rng.integers(-1000, 1000, size=shape).astype(np.int32)
    else:
        values = rng.standard_normal(shape).astype(np.float32).astype(DTYPES[dtype])
    np.save(path, values)
    return values


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(37,), (9, 13), (3, 5, 7), (2, 3, 4, 5)])
def test_meta_and_region_reads(tmp_path, dtype, shape):
    rng = np.random.default_rng(len(shape))
    path = tmp_path / "t.npy"
    values = _make(path, shape, dtype, rng)
    assert storage.tensor_meta(path) == (shape, dtype)
    start = tuple(s // 3 for s in shape)
    extent = tuple(s - s // 3 - (1 if s > 2 else 0) for s in shape)
    region = Region("t", start, extent)
    got = storage.read_region(path, region)
    want = values[tuple(slice(a, a + n) for a, n in zip(start, extent, strict=True))].astype(np.float32)
    assert got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)  # widening to f32 is exact for every storage dtype


def test_fortran_order_file_reads_by_region(tmp_path):
    values = np.asfortranarray(np.arange(20, dtype=np.float32).reshape(4, 5))
    np.save(tmp_path / "f.npy", values)
    got = storage.read_region(tmp_path / "f.npy", Region("f", (1, 2), (2, 3)))
    np.testing.assert_array_equal(got, values[1:3, 2:5])


def test_region_outside_the_tensor_is_refused(tmp_path):
    np.save(tmp_path / "t.npy", np.zeros((4, 4), np.float32))
    with pytest.raises(UserError, match="axis 1"):
        storage.read_region(tmp_path / "t.npy", Region("t", (0, 2), (4, 3)))
    with pytest.raises(UserError, match="rank"):
        storage.read_region(tmp_path / "t.npy", Region("t", (0,), (4,)))


@pytest.mark.parametrize("values,reason", [
    (np.zeros((2, 2), np.float64), "unsupported dtype"),
    (np.zeros((2, 2), ">f4"), "unsupported dtype"),
    (np.zeros((1, 1, 1, 1, 1), np.float32), "rank 5"),
    (np.zeros((), np.float32), "rank 0"),
])
def test_unsupported_files_are_refused(tmp_path, values, reason):
    np.save(tmp_path / "bad.npy", values)
    with pytest.raises(UserError, match=reason):
        storage.tensor_meta(tmp_path / "bad.npy")


def test_missing_and_garbage_files(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        storage.tensor_meta(tmp_path / "missing.npy")
    (tmp_path / "junk.npy").write_bytes(b"not numpy at all")
    with pytest.raises(UserError, match=r"junk.npy: not a .npy file \(bad magic: it starts with b'not nu'"):
        storage.tensor_meta(tmp_path / "junk.npy")


def test_check_tensor_names_both_shapes(tmp_path):
    np.save(tmp_path / "t.npy", np.zeros((4, 8), np.float16))
    storage.check_tensor(tmp_path / "t.npy", (4, 8), "f16")
    with pytest.raises(UserError, match=r"holds f16\[4, 8\], expected f32\[4, 8\]"):
        storage.check_tensor(tmp_path / "t.npy", (4, 8), "f32")


# ---- staging, writes, commit --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_staged_writes_commit_atomically(tmp_path, dtype):
    final = tmp_path / "out.npy"
    old = np.full((6, 4), 7, dtype=DTYPES[dtype])
    np.save(final, old)
    staging = storage.create_staging(final, (6, 4), dtype, "job-1")
    assert staging.parent == tmp_path and staging.name.startswith(".") and "job-1" in staging.name
    assert storage.tensor_meta(staging) == ((6, 4), dtype)
    values = np.arange(24, dtype=np.float32).reshape(6, 4) - 11.5
    storage.write_region(staging, Region("out", (0, 0), (3, 4)), values[:3])
    storage.write_region(staging, Region("out", (3, 0), (3, 4)), values[3:])
    # loads still see the original until the commit
    np.testing.assert_array_equal(storage.read_region(final, Region("out", (0, 0), (6, 4))),
                                  old.astype(np.float32))
    storage.commit(staging, final)
    assert not staging.exists()
    got = np.load(final)
    if dtype == "bf16":
        got = got.view(ml_dtypes.bfloat16)
    if dtype == "i32":
        want = np.rint(values).astype(np.int32)  # round half to even: -11.5 -> -12, -10.5 -> -10
    else:
        want = values.astype(DTYPES[dtype])
    np.testing.assert_array_equal(got, want)
    assert storage.find_stale_staging(tmp_path) == []


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_a_large_staging_copy_starts_its_data_on_a_disk_block(tmp_path, dtype):
    """1 MiB of data or more: the header is padded to 4096 bytes (a valid .npy header, which
    numpy reads), so that direct stores can write the data; a smaller copy keeps numpy's header."""
    final = tmp_path / "big.npy"
    rows = (1 << 20) // 256 // np.dtype(DTYPES[dtype]).itemsize  # rows of 256 elements: 1 MiB
    staging = storage.create_staging(final, (2 * rows, 256), dtype, "j")
    assert storage.layout(staging).offset == 4096
    assert storage.tensor_meta(staging) == ((2 * rows, 256), dtype)
    values = np.random.default_rng(0).standard_normal((2 * rows, 256)).astype(DTYPES[dtype])
    stored = np.empty_like(values, shape=(rows, 256))
    for first in (0, rows):
        stored[...] = values[first:first + rows]
        storage.write_region(staging, Region("big", (first, 0), (rows, 256)), stored, direct=True)
    storage.commit(staging, final)
    got = np.load(final)
    np.testing.assert_array_equal(got.view(DTYPES[dtype]) if dtype == "bf16" else got, values)
    small = storage.create_staging(tmp_path / "small.npy", (rows - 1, 256), dtype, "j")
    assert storage.layout(small).offset == 128  # as np.save writes it


def test_f32_to_bf16_and_f16_round_to_nearest(tmp_path):
    final = tmp_path / "r.npy"
    # 1 + 2^-8 + 2^-10 lies between two bf16 values and nearer the upper one: truncation would
    # give 1.0, rounding gives 1 + 2^-7.
    x = np.float32(1 + 2**-8 + 2**-10)
    for dtype, want in (("bf16", 1 + 2**-7), ("f16", float(np.float16(x)))):
        staging = storage.create_staging(final, (1,), dtype, "r")
        storage.write_region(staging, Region("r", (0,), (1,)), np.array([x], np.float32))
        got = storage.read_region(staging, Region("r", (0,), (1,)))
        assert got[0] == np.float32(want)
        storage.abort(staging)


def test_i32_out_of_range_is_refused(tmp_path):
    staging = storage.create_staging(tmp_path / "i.npy", (2,), "i32", "j")
    with pytest.raises(UserError, match="does not fit"):
        storage.write_region(staging, Region("i", (0,), (2,)), np.array([1.0, 3e9], np.float32))


def test_copy_existing_keeps_unwritten_regions(tmp_path):
    final = tmp_path / "c.npy"
    np.save(final, np.arange(8, dtype=np.float32))
    staging = storage.create_staging(final, (8,), "f32", "j", copy_existing=True)
    storage.write_region(staging, Region("c", (2,), (2,)), np.array([-1, -1], np.float32))
    storage.commit(staging, final)
    np.testing.assert_array_equal(np.load(final), [0, 1, -1, -1, 4, 5, 6, 7])


def test_abort_and_stale_staging(tmp_path):
    final = tmp_path / "o.npy"
    a = storage.create_staging(final, (3,), "f32", "job-a")
    b = storage.create_staging(final, (3,), "f32", "job-b")
    assert storage.find_stale_staging(tmp_path) == sorted([a, b])
    storage.abort(a)
    storage.abort(a)  # twice is fine
    assert storage.find_stale_staging(tmp_path) == [b]


def test_bad_job_id_is_refused(tmp_path):
    with pytest.raises(UserError, match="job id"):
        storage.staging_path(tmp_path / "o.npy", "../../evil")


def test_killed_writer_leaves_the_old_contents(tmp_path):
    final = tmp_path / "out.npy"
    np.save(final, np.full((64, 64), 3.0, np.float32))
    script = textwrap.dedent(f"""
        import os, signal, numpy as np
        from common import storage
        from schemas.program import Region
        final = {str(final)!r}
        staging = storage.create_staging(final, (64, 64), "f32", "killed")
        storage.write_region(staging, Region("out", (0, 0), (32, 64)), np.zeros((32, 64), np.float32))
        os.kill(os.getpid(), signal.SIGKILL)  # dies before commit
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env)
    assert proc.returncode == -9
    np.testing.assert_array_equal(np.load(final), np.full((64, 64), 3.0, np.float32))
    stale = storage.find_stale_staging(tmp_path)
    assert len(stale) == 1 and "killed" in stale[0].name


def docs_bf16_lines() -> str:
    """The code block of docs/runtime.md that reads a bf16 .npy file (of `c.npy`)."""
    import re

    from common.paths import repo_file

    text = repo_file("docs/runtime.md").read_text()
    match = re.search(r"these two lines read one:\n\n```python\n(.*?)```", text, re.S)
    assert match, "docs/runtime.md no longer shows the lines that read a bf16 file"
    lines = match.group(1).strip().splitlines()
    assert len(lines) == 2 and "c.npy" in lines[1], lines
    return match.group(1)


def test_bf16_outputs_read_back_with_the_two_lines_of_the_docs(tmp_path):
    """The two lines of docs/runtime.md, run as written (numpy alone once wrote `<V2`)."""
    final = tmp_path / "c.npy"
    staging = storage.create_staging(final, (2, 2), "bf16", "job1")
    storage.write_region(staging, Region("c", (0, 0), (2, 2)), np.array([[1, 2], [3, 0.5]], np.float32))
    storage.commit(staging, final)
    header = final.read_bytes()[:80]
    assert b"'descr': 'bfloat16'" in header
    script = ("import numpy as np\n" + docs_bf16_lines() +
              "assert c.dtype == ml_dtypes.bfloat16, c.dtype\nprint(c.astype(np.float32).tolist())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[1.0, 2.0], [3.0, 0.5]]"
    assert storage.tensor_meta(final) == ((2, 2), "bf16")


def test_bf16_written_by_numpy_itself_is_still_read(tmp_path):
    np.save(tmp_path / "v2.npy", np.array([1.5, 2.0], ml_dtypes.bfloat16))
    assert storage.tensor_meta(tmp_path / "v2.npy") == ((2,), "bf16")


@pytest.mark.parametrize("content", [b"", b"hello, this is a text file\n", bytes(range(256)) * 8,
                                     b"\x80\x04\x95 a pickle's first bytes"])
def test_read_npy_says_a_file_that_is_not_npy_has_bad_magic_and_never_mentions_pickle(tmp_path, content):
    (tmp_path / "x.npy").write_bytes(content)
    for writable in (False, True):
        with pytest.raises(UserError) as info:
            storage.read_npy(tmp_path / "x.npy", writable=writable)
        text = str(info.value)
        assert text.startswith(f"{tmp_path / 'x.npy'}: not a .npy file (bad magic: ")
        assert "pickle" not in text


def test_read_npy_reads_what_numpy_wrote(tmp_path):
    import ml_dtypes

    cases = {"c": np.arange(12, dtype=np.float32).reshape(3, 4),
             "f": np.asfortranarray(np.ones((3, 5), np.int32)),
             "e": np.zeros((0, 4), np.float16),
             "b": np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16),
             "d": np.arange(3, dtype=np.float64)}
    for name, array in cases.items():
        np.save(tmp_path / f"{name}.npy", array)
        for writable in (False, True):
            got = storage.read_npy(tmp_path / f"{name}.npy", writable=writable)
            assert got.dtype == array.dtype and got.shape == array.shape, name
            np.testing.assert_array_equal(got.astype(np.float64), array.astype(np.float64))
            assert got.flags.writeable == writable or got.size == 0, name
    with pytest.raises(UserError, match="holds Python objects"):
        np.save(tmp_path / "o.npy", np.array([{}], dtype=object), allow_pickle=True)
        storage.read_npy(tmp_path / "o.npy")
