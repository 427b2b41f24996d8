"""common.dataclass_code_cache: dataclasses behave exactly as without it, a stored entry spares
the compile, a broken or foreign file is a miss and never an error, writers never leave half a
file, and only the programs install it (the command and the pod it forks both use it; a user's
program that imports phobos does not get it)."""

from __future__ import annotations

import builtins
import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from common import dataclass_code_cache as dcc
from pod.cli import FIRST_JOB_MODULES_IMPORTED
from tests.common.dataclass_samples import MODULE, SAMPLE, behaviour, define, methods, three_ways
from tests.job_files import write_add_job

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def not_installed():
    """Every test starts and ends with the builtin exec in `dataclasses` (pytest's process is no
    program of ours)."""
    dcc.uninstall()
    yield
    dcc.uninstall()
    assert "exec" not in vars(dataclasses)


@pytest.fixture
def compiles(monkeypatch):
    """The compiles of "<string>" sources (what dataclasses' methods are compiled as) from now on."""
    seen = []
    real = builtins.compile

    def counting(source, filename, *args, **kwargs):
        if filename == "<string>":
            seen.append(source)
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    return seen


def test_dataclasses_behave_the_same_without_the_cache_with_it_cold_and_warm(tmp_path, compiles):
    (plain, cold, warm), cold_stats, warm_stats = three_ways(str(tmp_path))
    # every compile was the cold module's: the builtin exec compiles its text itself, and the warm
    # module's methods all came from the file
    assert len(compiles) == cold_stats["compiled"] > 0
    assert behaviour(plain) == behaviour(cold) == behaviour(warm)
    assert methods(plain) == methods(cold) == methods(warm)
    assert len(methods(plain)) >= 30
    assert cold_stats["files_read"] == 0
    assert warm_stats == {"hits": cold_stats["compiled"] + cold_stats["hits"], "compiled": 0, "files_read": 1,
                          "files_written": 0}


VERSION_1 = "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass A:\n    alpha: int\n"
VERSION_2 = VERSION_1 + "    omega: int = 1\n"  # each of its six texts names omega


def test_a_stored_entry_serves_only_its_own_text_and_an_edit_replaces_the_old_code(tmp_path, compiles):
    dcc.install(str(tmp_path))
    define(VERSION_1)
    dcc.save()
    dcc.uninstall()

    dcc.install(str(tmp_path))
    a = define(VERSION_2).A(5)
    assert repr(a) == "A(alpha=5, omega=1)" and dcc.stats()["compiled"] > 0
    assert dcc.save() == [MODULE]
    stored = dcc.decode((tmp_path / f"{MODULE}.marshal").read_bytes())
    assert len(stored) == 6 and all("omega" in text for text in stored)  # version 1's texts are gone
    dcc.uninstall()

    dcc.install(str(tmp_path))
    before = len(compiles)
    assert repr(define(VERSION_2).A(5)) == "A(alpha=5, omega=1)" and len(compiles) == before


def test_nothing_is_written_when_nothing_was_missing(tmp_path):
    dcc.install(str(tmp_path))
    define(SAMPLE)
    dcc.save()
    dcc.uninstall()
    before = os.stat(tmp_path / f"{MODULE}.marshal")

    dcc.install(str(tmp_path))
    define(SAMPLE)
    assert dcc.save() == [] and dcc.stats()["files_written"] == 0
    dcc.save_in_background()
    assert dcc._cache.writer is None  # no thread for nothing
    after = os.stat(tmp_path / f"{MODULE}.marshal")
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def _damage(path, how: str) -> None:
    data = path.read_bytes()
    header = len(dcc._header())
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "a byte changed":  # inside a stored text: still marshal, but not what was written
        at = data.index(b"__dataclass_", header + 12)
        path.write_bytes(data[:at] + b"X" + data[at + 1:])
    elif how == "another interpreter's":  # intact but for importlib's magic number
        at = len(dcc._FORMAT)
        path.write_bytes(data[:at] + bytes(b ^ 0xFF for b in data[at:at + 4]) + data[at + 4:])
    elif how == "another marshal version":
        at = header - 2
        path.write_bytes(data[:at] + bytes([data[at] + 1]) + data[at + 1:])
    elif how == "not a dict":
        path.write_bytes(dcc.encode([1, 2]))
    elif how == "not code":
        path.write_bytes(dcc.encode({"def f(): pass": "no code"}))
    elif how == "a folder":
        path.unlink()
        path.mkdir()
    elif how == "a fifo":
        path.unlink()
        os.mkfifo(path)
    elif how == "writable by others":
        path.chmod(0o666)
    elif how == "another user's":
        os.chown(path, 65534, 65534)
    else:
        raise AssertionError(how)


BROKEN = ["truncated", "empty", "a byte changed", "another interpreter's", "another marshal version",
          "not a dict", "not code", "a folder", "a fifo", "writable by others"]


@pytest.mark.parametrize("how", BROKEN + ["another user's"])
def test_a_broken_or_foreign_file_reads_as_empty(tmp_path, how, monkeypatch):
    dcc.install(str(tmp_path))
    expected = behaviour(define(SAMPLE))
    compiled = dcc.stats()["compiled"]
    dcc.save()
    dcc.uninstall()
    if how == "another user's" and os.geteuid() != 0:
        # only root can give the file away: the file keeps its owner and the reader is another user
        other_user = os.geteuid() + 1
        monkeypatch.setattr(os, "geteuid", lambda: other_user)
    else:
        _damage(tmp_path / f"{MODULE}.marshal", how)

    dcc.install(str(tmp_path))
    assert behaviour(define(SAMPLE)) == expected
    assert dcc.stats()["compiled"] == compiled and dcc.stats()["files_read"] == 0
    dcc.save()  # rewritten where it can be, silently left where it cannot (a folder in its place)
    dcc.uninstall()
    monkeypatch.undo()  # this user again, for the read of the rewritten file

    dcc.install(str(tmp_path))
    define(SAMPLE)
    assert dcc.stats()["compiled"] == (compiled if how == "a folder" else 0)


def test_an_unwritable_folder_is_skipped_silently(tmp_path):
    (tmp_path / "file").write_text("")
    dcc.install(str(tmp_path / "file" / "cache"))  # under a file: no folder can be made there
    define(SAMPLE)
    assert dcc.save() == []
    dcc.save_in_background()
    dcc.settle()
    assert dcc.stats()["files_written"] == 0


def test_no_home_folder_or_code_that_cannot_be_stored_is_no_error(tmp_path, monkeypatch):
    from common import cache

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(cache, "cache_dir", no_home)
    dcc.install()
    assert not dcc.active()
    dcc.uninstall()
    dcc.install(str(tmp_path))
    odd = dcc._cache.modules.setdefault("dcc_odd", dcc._Module({}))
    odd.used["text"], odd.missed = object(), True
    assert dcc.save() == [] and list(tmp_path.iterdir()) == []


def test_settle_waits_for_the_background_writer_and_writes_what_is_left(tmp_path):
    dcc.install(str(tmp_path))
    define(SAMPLE)
    dcc.save_in_background()
    define(VERSION_1, name="dcc_later")  # made after the background save began
    dcc.settle()
    assert not dcc._cache.writer.is_alive()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dcc_later.marshal", f"{MODULE}.marshal"]
    assert dcc.decode((tmp_path / "dcc_later.marshal").read_bytes())


WRITER = """
import os, sys, types
from common import dataclass_code_cache as dcc
folder, source, stop = sys.argv[1:]
dcc.install(folder)
module = types.ModuleType("racing")
sys.modules["racing"] = module
exec(source, module.__dict__)
print("ready", flush=True)
sys.stdin.readline()
saves = 0
while not os.path.exists(stop) or saves < 20:
    dcc._cache.modules["racing"].missed = True
    assert dcc.save() == ["racing"]
    saves += 1
"""


def test_two_processes_writing_one_file_at_once_leave_a_whole_one(tmp_path):
    folder, stop = tmp_path / "cache", tmp_path / "stop"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(folder), source, str(stop)], cwd=REPO,
                                env=program_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for source in (VERSION_1, VERSION_2)]
    for writer in writers:
        assert writer.stdout.readline() == "ready\n"
    for writer in writers:  # both loops start together
        writer.stdin.write("go\n")
        writer.stdin.flush()
    path, reads = folder / "racing.marshal", []
    try:
        while len(reads) < 200:  # a reader meanwhile, while both write, sees whole files only
            assert all(writer.poll() is None for writer in writers)
            try:
                reads.append(len(dcc.decode(path.read_bytes())))
            except FileNotFoundError:  # before the first rename
                pass
    finally:
        stop.touch()
    assert all(writer.wait(60) == 0 for writer in writers)
    assert set(reads) == {6}
    stored = dcc.decode(path.read_bytes())
    with_omega = [("omega" in text) for text in stored]
    assert len(stored) == 6 and (all(with_omega) or not any(with_omega))  # one writer's entries, whole
    assert [p.name for p in folder.iterdir()] == ["racing.marshal"]  # no temporary left


def _fake_dataclasses(source: str) -> types.ModuleType:
    module = types.ModuleType("dataclasses")
    exec(compile(source, "fake_dataclasses.py", "exec", dont_inherit=True), module.__dict__)
    return module


@pytest.mark.parametrize("source", [
    "def _create_fn(text, g, ns):\n    return compile(text, '<string>', 'exec')\n",  # no exec any more
    "exec = print\ndef _create_fn(text, g, ns):\n    exec(text, g, ns)\n",  # its own exec
    "from __future__ import annotations\ndef _create_fn(text, g, ns):\n    exec(text, g, ns)\n",
])
def test_a_dataclasses_that_does_not_call_exec_as_expected_gets_no_cache(tmp_path, monkeypatch, source):
    fake = _fake_dataclasses(source)
    monkeypatch.setitem(sys.modules, "dataclasses", fake)
    before = dict(vars(fake))
    dcc.install(str(tmp_path))
    assert not dcc.active() and vars(fake) == before
    assert dcc.save() == [] and dcc.stats()["hits"] == 0


def test_the_same_fake_calling_exec_plainly_does_get_it(tmp_path, monkeypatch):
    """The counterpart of the test above: its check is not one that always refuses."""
    fake = _fake_dataclasses("def _create_fn(text, g, ns):\n    exec(text, g, ns)\n")
    monkeypatch.setitem(sys.modules, "dataclasses", fake)
    dcc.install(str(tmp_path))
    assert dcc.active() and fake.exec is dcc._exec
    namespace = {}
    fake._create_fn("def f():\n    return 7\n", {"__name__": "dcc_fake"}, namespace)
    assert namespace["f"]() == 7 and dcc.stats()["compiled"] == 1


def program_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def _python(code: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env or program_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done


def test_installed_before_dataclasses_loads_it_takes_effect_at_the_import(tmp_path):
    """As in the command, which starts its pods before it imports dataclasses: a finder waits for
    that one import, and leaves no trace of itself."""
    done = _python(
        "import sys\n"
        "from common import dataclass_code_cache as dcc\n"
        f"dcc.install({str(tmp_path)!r})\n"
        "print('dataclasses' in sys.modules, type(sys.meta_path[0]).__name__)\n"
        "import dataclasses\n"
        "print(dcc.active(), dataclasses.exec is dcc._exec, any(isinstance(f, dcc._DataclassesFinder)\n"
        "      for f in sys.meta_path), type(dataclasses.__loader__).__name__, dataclasses.__spec__.loader\n"
        "      is dataclasses.__loader__)\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class A:\n"
        "    x: int\n"
        "print(A(1), dcc.stats()['compiled'])\n")
    # a frozen class's six methods: __init__, __repr__, __eq__, __setattr__, __delattr__, __hash__
    assert done.stdout.splitlines() == ["False _DataclassesFinder", "True True False SourceFileLoader True",
                                        "A(x=1) 6"]


def test_a_forked_child_keeps_it_with_counts_of_its_own(tmp_path):
    done = _python(
        "import os, sys\n"
        "from common import dataclass_code_cache as dcc\n"
        f"dcc.install({str(tmp_path)!r})\n"
        "import dataclasses\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class A:\n"
        "    x: int\n"
        "before = dcc._cache\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    dcc.install()\n"  # the pod's own entry point: nothing more happens
        "    @dataclasses.dataclass(frozen=True)\n"
        "    class B:\n"
        "        x: int\n"
        "    print('child', dcc._cache is before, dcc.stats()['hits'], dcc.stats()['compiled'], dcc.save(),\n"
        "          flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print('parent', dcc.stats()['compiled'], dcc.save())\n")
    # B's texts are A's but for the class's name, which they do not hold: all hits in the child,
    # and A's misses are the parent's to write
    assert done.stdout.splitlines() == ["child True 6 0 []", "parent 6 ['__main__']"]


API_PROGRAM = """
import dataclasses, sys
import phobos
from common import dataclass_code_cache as dcc
job = phobos.job({kernel!r}, tensors={{"a": "file:a.npy", "b": "file:b.npy", "c": "file:c.npy"}},
                 dims={{"N": 4096}}, base_dir={folder!r})
result = phobos.run(job, local_pods=1, pod_log_level="debug")
print(result.ok, dcc._cache is None, "exec" in vars(dataclasses),
      any(isinstance(f, dcc._DataclassesFinder) for f in sys.meta_path))
"""


def test_a_program_using_the_api_does_not_get_it_but_the_pods_it_starts_do(tmp_path):
    write_add_job(tmp_path, seed=5)
    program = API_PROGRAM.format(kernel=str(REPO / "examples" / "jobs" / "add.phk"), folder=str(tmp_path))
    done = _python(program, program_env(PHOBOS_CACHE_DIR=str(tmp_path / "cache")), timeout=120)
    assert done.stdout.split() == ["True", "True", "False", "False"]
    pods = [e for e in _events(done.stderr) if e.get("program") == "phobos-pod"]
    assert len(pods) == 1 and pods[0]["compiled"] + pods[0]["hits"] > 0  # pods are programs of ours


def _events(stderr: str, name: str = "dataclass code cache") -> list[dict]:
    """The JSON log events called `name` in the stderr that a command and its pods share: found
    wherever they start, since an event and its newline are two writes, and another process's
    event can come between them."""
    out, decoder, at = [], json.JSONDecoder(), stderr.find("{")
    while at >= 0:
        try:
            event, end = decoder.raw_decode(stderr, at)
        except ValueError:
            end = at + 1
        else:
            if isinstance(event, dict) and event.get("event") == name:
                out.append(event)
        at = stderr.find("{", end)
    return out


def _warm_the_pods_modules(folder, env) -> None:
    """A pod of its own until it has written its modules' files (it does so before it logs that
    its first job's modules are imported), then stopped."""
    pod = subprocess.Popen([sys.executable, "-m", "pod.main", "--device", "cpu", "--log-level", "debug",
                            "--storage-root", str(folder)], cwd=REPO, env=dict(env, PHOBOS_TOKEN="t" * 32),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in pod.stderr:
            if FIRST_JOB_MODULES_IMPORTED in line:
                break
    finally:
        pod.kill()
        pod.wait()


def _command_counts(folder, env) -> dict[str, dict]:
    done = subprocess.run([sys.executable, "-m", "scheduler.main", "add.job", "--local-pods", "1",
                           "--log-level", "debug", "--pod-log-level", "debug"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    events = {e["program"]: e for e in _events(done.stderr)}
    assert sorted(events) == ["phobos-pod", "phobos-sched"], done.stderr
    return events


def test_the_command_and_the_pod_it_forks_both_take_their_code_from_the_cache(tmp_path):
    env = program_env(PHOBOS_CACHE_DIR=str(tmp_path / "cache"))
    _warm_the_pods_modules(tmp_path, env)
    write_add_job(tmp_path, seed=3)
    first = _command_counts(tmp_path, env)  # the command's own modules compiled, then written
    second = _command_counts(tmp_path, env)
    assert first["phobos-sched"]["compiled"] > 0
    assert first["phobos-pod"]["compiled"] == 0 and first["phobos-pod"]["hits"] > 100
    assert second["phobos-sched"]["compiled"] == 0 and second["phobos-sched"]["hits"] > 100
    assert second["phobos-pod"]["compiled"] == 0 and second["phobos-pod"]["hits"] > 100


def test_settle_leaves_in_its_time_when_another_threads_save_is_stuck(tmp_path):
    """A pod saves in the thread that imports its first job's modules, not in the writer `settle`
    joins: a program leaving while that save hangs (a stuck file system) still leaves within
    settle's time, the cache left as it is."""
    import threading

    dcc.install(str(tmp_path))
    define(SAMPLE)
    assert dcc._cache.lock.acquire(timeout=30)  # another thread's save, stuck
    try:
        leaving = threading.Thread(target=dcc.settle, args=(0.05,), daemon=True)
        leaving.start()
        leaving.join(30)
        assert not leaving.is_alive()
    finally:
        dcc._cache.lock.release()
    assert list(tmp_path.iterdir()) == []
