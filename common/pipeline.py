"""The one pipeline protocol: a visible list of named stages, each `run(state) -> state`, run in
order by `run_stages`.

Every pipeline of phobos is such a list, whatever its state is:

- the compiler's front end (compiler/pipeline.py STAGES: parse, check, over an ir.Module),
- the CUDA back end (compiler/cuda/stages.py STAGES: bind ... nvrtc, over a Leaf),
- the cluster compiler (compiler/pipeline.py CLUSTER_STAGES: choose_values ... build_units,
  over a ClusterState),
- the scheduler's job checks (scheduler/jobs/prepare.py PREPARE_CHECKS and NEW_JOB_CHECKS, over the
  job being prepared).

The runner is where what every pipeline wants is done once: `until` stops after a named stage
(the tests look at one stage's output, the front end stops after check), `after_each(index, name,
state)` sees each stage's output (the dumps: PHOBOS_DUMP_STAGES, PHOBOS_CUDA_DUMP), and `timings`
collects each stage's wall time. A pipeline's own module keeps only what is its own: the list, the
state, how its state is printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple


class Stage(NamedTuple):
    """One named step of a pipeline. A NamedTuple so that `for name, run in STAGES` reads it too."""

    name: str
    run: Callable[[Any], Any]


def names(stages: Sequence[Stage]) -> tuple[str, ...]:
    return tuple(stage.name for stage in stages)


def check_until(stages: Sequence[Stage], until: str | None, what: str = "pipeline stage") -> None:
    """A ValueError naming the stages when `until` is none of them (a caller's bug or a typo)."""
    if until is not None and until not in names(stages):
        raise ValueError(f"no {what} {until!r}; stages: {', '.join(names(stages))}")


def run_stages(
    stages: Sequence[Stage],
    state: Any,
    *,
    until: str | None = None,
    after_each: Callable[[int, str, Any], None] | None = None,
    timings: list[tuple[str, float]] | None = None,
    what: str = "pipeline stage",
) -> Any:
    """Run `stages` in order on `state` and return the last one's output, stopping after the
    stage named `until` (inclusive). `after_each(index, name, state)` is called with each stage's
    output; `timings`, when given, gets one (name, seconds) per stage run."""
    check_until(stages, until, what)
    for index, stage in enumerate(list(stages)):  # a copy: a stage registering another is not run now
        start = time.perf_counter()
        state = stage.run(state)
        if timings is not None:
            timings.append((stage.name, time.perf_counter() - start))
        if after_each is not None:
            after_each(index, stage.name, state)
        if stage.name == until:
            break
    return state


def dump_selection(dump: bool | str | None) -> set[str] | bool:
    """Which stages a dump request names: True (every one), False (none) or a set of names, from
    True/False or text like "1", "all", "check,bind" (PHOBOS_DUMP_STAGES's form)."""
    if dump is True or dump in ("1", "all", "true", "yes"):
        return True
    if not dump:
        return False
    return {n.strip() for n in str(dump).split(",") if n.strip()}


def selected(selection: set[str] | bool, name: str) -> bool:
    return selection is True or bool(selection and name in selection)


def format_timings(timings: Sequence[tuple[str, float]]) -> str:
    """One line per stage, `name  12.3 ms`, aligned, for a human reading where time went."""
    width = max((len(name) for name, _ in timings), default=0)
    return "\n".join(f"{name:<{width}}  {seconds * 1000:8.1f} ms" for name, seconds in timings)
