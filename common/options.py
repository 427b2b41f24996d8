"""The one place that reads (and writes) the process environment.

`current()` reads every variable phobos knows into one frozen `Options`, afresh at each call (a
few dictionary look-ups), so a test's or a user's change takes effect at the next read. Every
other module asks `current()` (tests/foundation/test_environment_reads.py holds them to it);
child processes get `environment()`, a copy; the few switches whose names are chosen at run time
(BLAS thread counts, the compiled-leaf cache's key) use `variable(name)`, from the modules that
tests/foundation/test_environment_reads.py names (RAW_READERS).

  variable (field, default): meaning
  PHOBOS_CACHE_DIR (cache_dir, None): the cache folder (None: ~/.cache/phobos, common/cache.py)
  PHOBOS_RETUNE=1 (retune, False): the autotuner measures again, ignoring its cache
  PHOBOS_TUNE_QUIET=1 (tune_quiet, False): the autotuner prints no progress
  PHOBOS_TUNE_EXHAUSTIVE=1 (tune_exhaustive, False): the autotuner makes none of its measured cuts
    (every family's space searched, every candidate timed in full; tuning/autotune.py)
  PHOBOS_TUNE_CUT=0|1 (tune_cut, True): the autotuner stops timing a candidate whose first two
    launches are clearly slow (tuning/timing.py); 0 times every candidate in full
  PHOBOS_CUDA_DUMP=DIR (cuda_dump, None): each CUDA stage's product written to DIR (stages.py)
  PHOBOS_DUMP_STAGES=a,b|all (dump_stages, ""): the frontend stages printed (compiler/pipeline.py)
  PHOBOS_CUDA_TMA=0 (cuda_tma, True): the tuner leaves the TMA ring out of its search
  PHOBOS_CUDA_PERSISTENT=1|0 (cuda_persistent, None): the tuner tries the TMA ring on a persistent grid
    (compiler/cuda/mainloops/tma_ws/persistent.py), or leaves it out; unset: schedule.PERSISTENT_TUNED
  PHOBOS_CUDA_WIDE_BLOCKS=0 (cuda_wide_blocks, True): the tuner leaves CUDA-core dots on 16 x 8 /
    8 x 16 register blocks out of its search (schedule.SIMT_WIDE_BLOCK, codegen.KERNEL_REGISTER_BUDGET)
  PHOBOS_CUDA_DOT_UNROLL=N (dot_unroll, 0): dot's k loop unrolled N steps (0: fully)
  PHOBOS_SPLIT_FAN_IN=N (split_fan_in, 8): a split loop's partials merged N at a time by a tree of
    launches before its combine (compiler/cuda/mainloops/split_loop/tree.py; 0: the combine merges them all)
  PHOBOS_SPLIT_ONE_LAUNCH=1|0 (split_one_launch, None): a split loop whose grid is one CTA runs in one
    launch, the partial's last CTAs merging the partials (compiler/cuda/mainloops/split_loop/fused.py);
    0: never; unset: where the cost model says (split_loop/fused.py one_launch_pays)
  PHOBOS_SPLIT_SCHEDULE=stages=4,threads=128,.. (split_schedule, ""): fields of the split loop's
    partial kernel's Schedule (compiler/cuda/schedule.py) over the leaf's: its ring depth, CTA size
    (mainloops/split_loop/launch.py partial_schedule; benchmarks/decode_sweep.sh sweeps them)
  PHOBOS_NVRTC=PATH (nvrtc, None): the NVRTC library tried first (nvrtc.py)
  CUDA_HOME, CUDA_PATH (cuda_homes, ()): CUDA installs searched for NVRTC
  PHOBOS_TOKEN (token, None): the cluster's token (common/cluster_token.py)
  PHOBOS_POD_MODULE (pod_module, pod.main): the module local pods run (tests swap in a GPU-less one)
  CUDA_VISIBLE_DEVICES (visible_devices, None): the GPUs a command may give its local pods
  BUILD_WORKING_DIRECTORY (build_working_directory, None): the user's folder under `bazel run` (cli.py)
  PHOBOS_FAULT (fault, ""): test-only: a pod's injected faults (pod/faults.py)
  PHOBOS_COMMIT_FAULT (commit_fault, ""): test-only: a kill inside an output commit (common/commit.py)
  PHOBOS_RUN_FAULT (run_fault, ""): test-only: a stop inside `compiler run`'s output (compiler/cli/run.py)
  PHOBOS_TEST_TICKET_TTL_S (ticket_ttl_s, None): test-only: a transfer ticket's life (pod/rpc/transfer.py)
  PHOBOS_SETUP_DONE (setup_done, 0.0): when tools/bazel finished its set-up, Unix time
    (scheduler/tracing/phases.py); tools/bazel's stamp, not a user's: one that is no number counts as 0

A variable set to the empty string counts as unset, except CUDA_VISIBLE_DEVICES (empty: no GPU).
A value that is not of its field's type is the user's error (OptionError, a UserError: one line
and exit code 2 from a command), naming the variable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from common.errors import UserError

CACHE_DIR = "PHOBOS_CACHE_DIR"
TOKEN = "PHOBOS_TOKEN"
FAULT = "PHOBOS_FAULT"
COMMIT_FAULT = "PHOBOS_COMMIT_FAULT"
RUN_FAULT = "PHOBOS_RUN_FAULT"
SETUP_DONE = "PHOBOS_SETUP_DONE"  # tools/bazel's end of set-up (scheduler/tracing/phases.py)
# the variables that change the code the CUDA compiler generates or the NVRTC it loads (a
# compiled leaf cached under other values is not reused: scheduler/running/leaf_ptx.py)
CODE_SWITCHES = ("PHOBOS_CUDA_DOT_UNROLL", "PHOBOS_SPLIT_FAN_IN", "PHOBOS_SPLIT_SCHEDULE",
                 "PHOBOS_SPLIT_ONE_LAUNCH", "PHOBOS_NVRTC", "CUDA_HOME", "CUDA_PATH")
DUMPS = ("PHOBOS_CUDA_DUMP", "PHOBOS_DUMP_STAGES")  # asked for the compiler's stages


class OptionError(UserError, ValueError):
    """A variable whose value is not of its field's type (the message names it)."""


class Options(NamedTuple):
    """Frozen, typed: a NamedTuple rather than a dataclass, as the commands read it before they
    spawn their pods, ahead of importing `dataclasses` (tests/scheduler/test_local_pods_start.py)."""

    cache_dir: Path | None = None
    retune: bool = False
    tune_quiet: bool = False
    tune_exhaustive: bool = False
    tune_cut: bool = True
    cuda_dump: Path | None = None
    dump_stages: str = ""
    cuda_tma: bool = True
    cuda_persistent: bool | None = None
    cuda_wide_blocks: bool = True
    dot_unroll: int = 0
    split_fan_in: int = 8
    split_schedule: str = ""
    split_one_launch: bool | None = None
    nvrtc: str | None = None
    cuda_homes: tuple[str, ...] = ()
    token: str | None = None
    pod_module: str = "pod.main"
    visible_devices: str | None = None
    build_working_directory: Path | None = None
    fault: str = ""
    commit_fault: str = ""
    run_fault: str = ""
    ticket_ttl_s: float | None = None
    setup_done: float = 0.0


def current() -> Options:
    """The options of this process's environment now."""
    env = os.environ

    def text(name: str) -> str | None:
        return env.get(name) or None

    def path(name: str) -> Path | None:
        value = text(name)
        return Path(value) if value else None

    return Options(
        cache_dir=path(CACHE_DIR),
        retune=env.get("PHOBOS_RETUNE") == "1",
        tune_quiet=env.get("PHOBOS_TUNE_QUIET") == "1",
        tune_exhaustive=env.get("PHOBOS_TUNE_EXHAUSTIVE") == "1",
        tune_cut=_switch("PHOBOS_TUNE_CUT") is not False,
        cuda_dump=path("PHOBOS_CUDA_DUMP"),
        dump_stages=env.get("PHOBOS_DUMP_STAGES", ""),
        cuda_tma=env.get("PHOBOS_CUDA_TMA", "1") != "0",
        cuda_persistent=_switch("PHOBOS_CUDA_PERSISTENT"),
        cuda_wide_blocks=env.get("PHOBOS_CUDA_WIDE_BLOCKS") != "0",
        dot_unroll=_number("PHOBOS_CUDA_DOT_UNROLL", int, 0),
        split_fan_in=_number("PHOBOS_SPLIT_FAN_IN", int, 8),
        split_schedule=env.get("PHOBOS_SPLIT_SCHEDULE", ""),
        split_one_launch=_switch("PHOBOS_SPLIT_ONE_LAUNCH"),
        nvrtc=text("PHOBOS_NVRTC"),
        cuda_homes=tuple(v for v in (text("CUDA_HOME"), text("CUDA_PATH")) if v),
        token=text(TOKEN),
        pod_module=text("PHOBOS_POD_MODULE") or "pod.main",
        visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        build_working_directory=path("BUILD_WORKING_DIRECTORY"),
        fault=env.get(FAULT, ""),
        commit_fault=env.get(COMMIT_FAULT, ""),
        run_fault=env.get(RUN_FAULT, ""),
        ticket_ttl_s=_number("PHOBOS_TEST_TICKET_TTL_S", float, None),
        setup_done=_stamp(SETUP_DONE),
    )


def _number(name: str, kind, default):
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return kind(value)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise OptionError(f"${name}={value!r} is not {what}") from None


def _stamp(name: str) -> float:
    """A time a wrapper wrote (not the user): one that is no number is left out, as if unset."""
    try:
        return float(os.environ.get(name) or 0.0)
    except ValueError:
        return 0.0


def _switch(name: str) -> bool | None:
    """1: on, 0: off, unset: None (the caller's own rule decides)."""
    value = os.environ.get(name)
    if not value:
        return None
    if value not in ("0", "1"):
        raise OptionError(f"${name}={value!r} is not 0 or 1")
    return value == "1"


def variable(name: str) -> str | None:
    """One variable's raw value, for names chosen at run time (see the module's doc)."""
    return os.environ.get(name)


def set_variable(name: str, value: str) -> None:
    """Set a variable for this process and the children it starts."""
    os.environ[name] = value


def environment() -> dict[str, str]:
    """A copy of the environment, for a child process's `env=`."""
    return dict(os.environ)


def replace_environment(env: dict[str, str]) -> None:
    """This process's environment becomes `env` (a forked pod before it loads numpy)."""
    os.environ.clear()
    os.environ.update(env)
