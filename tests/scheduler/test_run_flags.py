"""Pure pieces of the run command: --expect comparison, --pods parsing, tokens, local devices."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import UserError
from scheduler.pods.local_pods import choose_devices
from scheduler.run_cli import compare, load_expected, parse_pods, read_token
from scheduler.tracing.tracefile import summarize
from schemas.remote_errors import remote_reason


def test_compare_accepts_summation_order_noise_and_names_real_differences():
    want = np.linspace(-100, 100, 1000, dtype=np.float32)
    noise = want * (1 + 1e-6)  # a few ulps, as a different summation order gives
    assert compare("C", noise, want) is None
    bad = want.copy()
    bad[123] += 1.0
    problem = compare("C", bad, want)
    assert "1 of 1000 elements differ" in problem and "[123]" in problem
    assert "shape" in compare("C", want[:10], want)
    nan = np.array([np.nan, 1.0], np.float32)
    assert compare("C", nan, nan) is None
    assert compare("C", np.array([np.inf], np.float32), np.array([np.inf], np.float32)) is None
    assert compare("C", np.array([1.0], np.float32), np.array([np.nan], np.float32)) is not None


def test_parse_pods():
    assert parse_pods(["a:1,b:2", "c:3"]) == ("a:1", "b:2", "c:3")
    assert parse_pods(None) == ()
    for bad in (["a"], ["a:x"], [":5"], ["a:0"], ["a:70000"]):
        with pytest.raises(UserError, match="expected HOST:PORT"):
            parse_pods(bad)


def test_read_token(tmp_path, monkeypatch):
    f = tmp_path / "token"
    f.write_text("  secret-0123456789abcdef \nignored\n")
    assert read_token(str(f)) == "secret-0123456789abcdef"
    f.write_text("\n")
    with pytest.raises(UserError, match="holds no token"):
        read_token(str(f))
    monkeypatch.setenv("PHOBOS_TOKEN", "from-env-0123456789")
    assert read_token(None) == "from-env-0123456789"
    monkeypatch.delenv("PHOBOS_TOKEN")
    assert read_token(None) is None


def test_choose_devices():
    assert choose_devices(None, 0) == ["cpu", "cpu"]
    assert choose_devices(3, 0) == ["cpu"] * 3
    assert choose_devices(None, 2) == ["0", "1"]
    assert choose_devices(2, 1) == ["0", "0"]  # two pods sharing one GPU
    with pytest.raises(UserError):
        choose_devices(0, 1)


def test_remote_error_reason_isremote_reason():
    remote = Exception("remote exception: message = Traceback (most recent call last):\n"
                       '  File "x.py", line 1, in login\n    raise PermissionError("no")\n'
                       "PermissionError: login refused: wrong token\n\nstack: 7f 7f")
    assert remote_reason(remote) == "login refused: wrong token"
    assert remote_reason(OSError("Connection refused")) == "Connection refused"
    assert remote_reason(TimeoutError()) == "TimeoutError"


def test_summarize_counts_bytes_and_compute_per_node():
    events = [
        {"node": 0, "kind": "load", "bytes": 100, "start": 0.0, "end": 0.1},
        {"node": 0, "kind": "compute", "bytes": 0, "start": 0.1, "end": 0.4},
        {"node": 0, "kind": "serve", "bytes": 100, "start": 0.2, "end": 0.2},
        {"node": 1, "kind": "fetch", "bytes": 100, "start": 0.2, "end": 0.3},
        {"node": 1, "kind": "store", "bytes": 50, "start": 0.5, "end": 0.6},
    ]
    s = summarize(events, [0, 1], 1.0)
    n0, n1 = s["nodes"]
    assert (n0["instructions"], n0["bytes_loaded"], n0["bytes_served"]) == (2, 100, 100)
    assert n0["compute_s"] == pytest.approx(0.3)
    assert (n1["instructions"], n1["bytes_fetched"], n1["bytes_stored"]) == (2, 100, 50)
    assert s["wall_s"] == 1.0


@pytest.mark.parametrize("token", ["x", "fifteen-bytes!!", "é" * 7])
def test_a_token_shorter_than_16_bytes_is_refused_saying_how_to_make_one(tmp_path, monkeypatch, token):
    f = tmp_path / "token"
    f.write_text(token + "\n")
    for source, argument in ((f"--token-file {f}", str(f)), ("$PHOBOS_TOKEN", None)):
        monkeypatch.setenv("PHOBOS_TOKEN", token)
        with pytest.raises(UserError) as refused:
            read_token(argument)
        text = str(refused.value)
        assert text.startswith(source) and "16" in text and "secrets.token_urlsafe" in text
        assert token not in text.replace(str(f), "")  # never echo the token (the file's path may hold it)
    monkeypatch.setenv("PHOBOS_TOKEN", "sixteen-bytes!!!")
    assert read_token(None) == "sixteen-bytes!!!"


def test_a_dropped_connection_says_so():
    class Dropped(Exception):  # what pycapnp raises: KJ's kind apart from the description
        type = "DISCONNECTED"
        description = "message = [Errno 32] Broken pipe"

    assert remote_reason(Dropped()) == "disconnected: [Errno 32] Broken pipe"


@pytest.mark.parametrize("content", [b"plain text, not numbers\n", bytes(range(256))])
def test_expect_of_a_file_that_is_not_npy_says_bad_magic(tmp_path, content):
    (tmp_path / "want.npy").write_bytes(content)
    with pytest.raises(UserError) as info:
        load_expected([f"C={tmp_path / 'want.npy'}"])
    text, want = str(info.value), tmp_path / "want.npy"
    assert text.startswith(f"--expect C={want}: {want}: not a .npy file (bad magic")
    assert "pickle" not in text
