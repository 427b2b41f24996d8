"""The `phobos-sched JOB` command: user errors before anything runs (exit 2, one line, nothing
written), a wrong token, and --expect (exit 0 on a match, 1 on a difference)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from common.cli import run_main
from scheduler import cli
from tests.job_files import make_job, write_inputs

N = 1024
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture()
def folder(tmp_path):
    write_inputs(tmp_path, {"a": np.arange(N, dtype=np.float32), "b": np.ones(N, np.float32)})
    return tmp_path


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main(cli.main, argv)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def one_line_error(code, err):
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_missing_input_is_refused_before_any_pod(folder, capsys, monkeypatch):
    monkeypatch.setenv("PHOBOS_TOKEN", "t" * 32)
    job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "missing", "c": "c"})
    code, _, err = run_cli([str(job), "--pods", "127.0.0.1:1", "--storage-root", str(folder)], capsys)
    # the storage check comes before even trying to reach the (non-existent) pod
    assert "missing.npy: no such file" in one_line_error(code, err)
    assert not (folder / "c.npy").exists()


def test_wrong_shape_is_refused(folder, capsys):
    np.save(folder / "short.npy", np.zeros(N - 1, np.float32))
    job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "short", "c": "c"})
    code, _, err = run_cli([str(job), "--storage-root", str(folder)], capsys)
    assert "expected f32[1024]" in one_line_error(code, err)


def test_uri_outside_the_storage_roots_is_refused(folder, tmp_path_factory, capsys):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    code, _, err = run_cli([str(job), "--storage-root", str(elsewhere)], capsys)
    assert "outside the storage roots" in one_line_error(code, err)


def test_bad_flags(folder, capsys):
    job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    code, _, err = run_cli([str(job), "--pods", "nonsense"], capsys)
    assert "expected HOST:PORT" in one_line_error(code, err)
    env = os.environ.pop("PHOBOS_TOKEN", None)
    try:
        code, _, err = run_cli([str(job), "--pods", "127.0.0.1:5"], capsys)
        assert "token" in one_line_error(code, err)
    finally:
        if env is not None:
            os.environ["PHOBOS_TOKEN"] = env
    code, _, err = run_cli([str(folder / "nope.capnp")], capsys)
    assert "cannot read job file" in one_line_error(code, err)
    code, _, err = run_cli([str(job), "--expect", "a=x.npy"], capsys)
    one_line_error(code, err)


def test_wrong_token_is_refused_naming_the_token(folder, capsys, monkeypatch):
    path = REPO + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    env = dict(os.environ, PHOBOS_TOKEN="right-token-0123456789", PYTHONPATH=path)
    module = os.environ.get("PHOBOS_POD_MODULE", "pod.main")
    pod = subprocess.Popen([sys.executable, "-m", module, "--listen", "127.0.0.1:0", "--device", "cpu",
                            "--storage-root", str(folder), "--log-level", "error"],
                           env=env, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = pod.stdout.readline()
        assert line.startswith("PHOBOS_POD_LISTENING "), line
        address = line.split()[1]
        job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
        monkeypatch.setenv("PHOBOS_TOKEN", "wrong-token-0123456789")
        code, _, err = run_cli([str(job), "--pods", address, "--storage-root", str(folder)], capsys)
        text = one_line_error(code, err)
        assert "refused the token" in text and "wrong token" in text
        assert "wrong-token" not in text and "right-token" not in text
    finally:
        pod.kill()
        pod.wait()


def test_expect_match_and_mismatch(folder, capsys):
    job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    np.save(folder / "want.npy", np.arange(N, dtype=np.float32) + 1)
    want_bad = np.arange(N, dtype=np.float32) + 1
    want_bad[700] += 0.5
    np.save(folder / "bad.npy", want_bad)
    trace = folder / "trace.json"
    code, out, err = run_cli([str(job), "--storage-root", str(folder), "--expect", f"c={folder / 'want.npy'}",
                              "--trace", str(trace), "--cluster", "BLOCK=256"], capsys)
    assert code == 0, err
    assert "c matches" in out and "succeeded" in out and "wall time" in out
    assert trace.exists()
    code, out, err = run_cli([str(job), "--storage-root", str(folder), "--expect", f"c={folder / 'bad.npy'}",
                              "--local-pods", "3"], capsys)
    assert code == 1
    assert "first at [700]" in err


@pytest.mark.parametrize("protected", ["c", "--trace"])
def test_a_read_only_output_is_refused_before_any_pod_and_nothing_is_written(folder, capsys, protected):
    np.save(folder / "c.npy", np.full(N, 7, np.float32))
    (folder / "trace.json").write_text("{}")
    target = folder / ("c.npy" if protected == "c" else "trace.json")
    os.chmod(target, 0o444)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    before[job.name] = job.read_bytes()
    code, _, err = run_cli([str(job), "--storage-root", str(folder), "--trace", str(folder / "trace.json")],
                           capsys)
    line = one_line_error(code, err)
    label = "tensor c" if protected == "c" else "--trace"
    assert line == (f"error: {label}: {target} is read-only; it is not overwritten "
                    "(make it writable, or write the output elsewhere)")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
