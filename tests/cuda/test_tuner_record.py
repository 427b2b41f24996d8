"""The family cut (autotune.family_behind) against what a GPU measured: tuner_record_h200.json holds
41 full searches of the tuner on an H200 (benchmarks/results/nvidia-h200/, device calls of
2026-12-01: tensor-core matmul 4096^3 and 8192^3, attention D=64/128 at N=4096 and 16384, full and
causal), each family's probe times, its best time and its number of candidates. Replayed on
the CPU: every family holding the winner or a candidate within 3% of it is searched, and the cut
still skips a good part of the candidates (what it is for)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.cuda.tuning import autotune

RECORDS = json.loads(Path(__file__).with_name("tuner_record_h200.json").read_text())["records"]
NEAR = 1.03  # a family with a candidate this close to the winner must be searched


@pytest.fixture(autouse=True)
def _cuts_on(monkeypatch):
    """The replay is of the default tuner: a shell's PHOBOS_TUNE_EXHAUSTIVE=1 would turn the cut off."""
    monkeypatch.delenv("PHOBOS_TUNE_EXHAUSTIVE", raising=False)


def _behind(record: dict, family: dict) -> str | None:
    fastest = min(f["probe_ms"][0] for f in record["families"].values())
    return autotune.family_behind([(None, ms) for ms in family["probe_ms"]], fastest)


@pytest.mark.parametrize("record", RECORDS, ids=[f"{r['source'].split('/')[-2]}-{i}"
                                                  for i, r in enumerate(RECORDS)])
def test_every_family_near_the_winner_is_searched(record):
    for name, family in record["families"].items():
        if family["best_ms"] <= NEAR * record["winner_ms"]:
            assert _behind(record, family) is None, (record["source"], record["dims"], name)


def test_the_cut_skips_a_good_part_of_the_recorded_candidates():
    """mma.sync behind warpgroup MMA at 8192^3 (about 2x) and behind the TMA-fed attention; the
    finalists of the skipped families are over a third of all the recorded candidates."""
    skipped = sum(f["candidates"] - len(f["probe_ms"]) for r in RECORDS for f in r["families"].values()
                  if _behind(r, f))
    assert skipped > sum(r["candidates"] for r in RECORDS) / 3
    eighty_one = [r for r in RECORDS if r["dims"] == {"M": 8192, "N": 8192, "K": 8192}]
    assert eighty_one and all(_behind(r, r["families"]["mma.sync"]) for r in eighty_one)
