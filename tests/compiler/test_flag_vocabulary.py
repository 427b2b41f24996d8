"""One vocabulary of flags in both programs: every command that picks a kernel does it with
--kernel NAME, every command that takes values takes @autotune values as --tile NAME=V and
@cluster values as --cluster NAME=V, and the spellings of earlier versions (--set, --cluster-set,
--name) fail with one line naming the new ones, never with argparse's usage text."""

from __future__ import annotations

import pytest

from common.cli import run_main
from common.paths import repo_file
from compiler.cli.args import RETIRED_FLAGS
from compiler.cli.commands import main as compiler_main
from scheduler.cli import main as scheduler_main

ADD = str(repo_file("examples/add.phk"))
JOB = str(repo_file("examples/jobs/matmul.capnp"))

KERNEL, TILE, CLUSTER = "--kernel NAME", "--tile NAME=V", "--cluster NAME=V"
# (program, the command's words, flags it must have)
COMMANDS = [
    (compiler_main, ["run", ADD], (KERNEL, TILE)),
    (compiler_main, ["cuda", ADD], (KERNEL, TILE)),
    (compiler_main, ["ptx", ADD, "-o", "x.ptx"], (KERNEL, TILE)),
    (compiler_main, ["cluster", ADD], (KERNEL, TILE, CLUSTER)),
    (scheduler_main, ["new-job", ADD, "-o", "job.capnp"], (KERNEL, TILE, CLUSTER)),
    (scheduler_main, [JOB], (TILE, CLUSTER)),  # the job file names its kernel
]
IDS = ["run", "cuda", "ptx", "cluster", "new-job", "sched-run"]


def _exit(main, argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run_main(main, argv)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


@pytest.mark.parametrize("main, words, flags", COMMANDS, ids=IDS)
def test_every_command_spells_its_flags_the_same(main, words, flags, capsys):
    code, out, _ = _exit(main, [*words[:1], "--help"] if words[0] != JOB else ["--help"], capsys)
    assert code == 0
    for flag in flags:
        assert flag in out, f"{words[0]} --help lacks {flag}"


@pytest.mark.parametrize("main, words, flags", COMMANDS, ids=IDS)
@pytest.mark.parametrize("retired", sorted(RETIRED_FLAGS))
def test_retired_spellings_fail_naming_the_new_ones(main, words, flags, retired, capsys, tmp_path,
                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written, and nothing is
    code, out, err = _exit(main, [*words, retired, "BLOCK=64" if retired != "--name" else "add"], capsys)
    assert (code, out) == (2, "")
    assert err == f"error: {RETIRED_FLAGS[retired]}\n"
    assert list(tmp_path.iterdir()) == []
