"""docs/architecture.md prints the two state machines' transition tables: they match the code."""

from __future__ import annotations

from common.paths import REPO_ROOT
from pod.statemachine import machine as m
from scheduler.running import cluster_messages as cm

DOC = REPO_ROOT / "docs" / "architecture.md"


def _rows() -> set[str]:
    return {line.strip() for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| ")}


def test_the_pods_link_table_is_printed_as_it_is():
    rows = _rows()
    for (state, stimulus), (_, effect) in m.LINK_TABLE.items():
        assert f"| {state} | {stimulus.__name__} | {effect} |" in rows, (state, stimulus.__name__)
    for stimulus, (_, effect) in m.JOB_TABLE.items():
        assert f"| {stimulus.__name__} | {effect} |" in rows, stimulus.__name__


def test_the_schedulers_transitions_are_printed_as_they_are():
    rows = _rows()
    for stimulus, row in cm.TRANSITIONS.items():
        assert f"| {stimulus.__name__} | `{row.rule}` | {row.effect} |" in rows, stimulus.__name__
