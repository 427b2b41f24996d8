"""Fuzz soak: thousands of mutated kernel sources, job files and RPC byte streams.

    PYTHONPATH=. .venv/bin/python tools/fuzz_soak.py --minutes 5 [--seed 1]

The same cases as tests/faults/test_fuzz.py, driven by a seeded random generator instead of
hypothesis so the soak can run for as long as asked. Every case must end in a clear error or a
correct result (a job that runs matches the reference interpreter); a pod must never crash. Each
failure prints its case number; the run is reproducible from --seed. Exit code 1 on any failure.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults.fuzz import (  # noqa: E402
    check_kernel_source,
    judge_job_bytes,
    mutate_bytes,
    mutate_source,
    random_edits,
    record_client_stream,
    restore,
    send_raw,
    snapshot,
)
from tests.faults.harness import REPO, Pods
from tests.job_files import make_job


class Soak:
    """The pods and files the cases run against, and what they counted: a kernel case checks a
    mutated example, a job case runs a mutated job file on two runner pods, an rpc case sends a
    mutated recording of a client's byte stream to a third pod."""

    def __init__(self, pods: Pods, root: Path, seed: int):
        self.pods, self.root, self.seed = pods, root, seed
        self.sources = [p.read_text() for p in sorted((REPO / "examples").rglob("*.phk"))]
        self.counts: Counter = Counter()
        self.reasons: set[str] = set()
        data = np.random.default_rng(seed)
        for name in "ab":
            np.save(root / f"{name}.npy", data.standard_normal(1024).astype(np.float32))
        valid_job = make_job(root, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"}, name="valid")
        self.valid = valid_job.read_bytes()
        self.saved = snapshot(root)
        self.start_runners()
        self.target = pods.start(1)[0]
        rpc_job = make_job(root, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"}, name="rpc")
        self.stream = record_client_stream(pods, rpc_job, root, pods.healthy()[0].address)

    def start_runners(self) -> None:
        self.runner_pods = self.pods.start(2)
        self.session = self.pods.session(self.runner_pods)

    def kernel_case(self, rng: random.Random, edits) -> None:
        text = mutate_source(rng.choice(self.sources), edits)
        self.counts[f"kernel {check_kernel_source(text)}"] += 1

    def job_case(self, case: int, edits) -> None:
        mutated = mutate_bytes(self.valid, edits)
        try:
            session = self.session
            verdict = judge_job_bytes(mutated, self.root, lambda p: self.pods.run(session, p, timeout=60))
        finally:
            restore(self.root, self.saved)
        self.counts[f"job {verdict.outcome}"] += 1
        if verdict.outcome == "failed" and verdict.detail not in self.reasons:
            self.reasons.add(verdict.detail)
            print(f"case {case}: job failed with a reason: {verdict.detail}", flush=True)
        if self.session.lost:  # a runner pod died under a mutated job: keep the evidence
            kept = Path(tempfile.gettempdir()) / f"fuzz-soak-case-{self.seed}-{case}.capnp"
            kept.write_bytes(mutated)
            tails = "\n".join(p.log.read_text()[-1500:] for p in self.runner_pods)
            raise AssertionError(f"runner pods lost: {self.session.lost}; job in {kept}\n{tails}")

    def rpc_case(self, edits) -> None:
        send_raw(self.target.address, mutate_bytes(self.stream, edits), timeout=3.0)
        self.counts["rpc sent"] += 1
        if not self.target.alive:
            code = self.pods.wait_exit(self.target, 5)
            log = self.target.log.read_text()
            if code != 0 or not ("shutdown requested" in log or "connection dropped" in log):
                raise AssertionError(f"pod died with code {code}: {log[-1500:]}")
            self.counts["rpc orderly pod exits"] += 1
            self.target = self.pods.start(1)[0]

    def runners_lost(self) -> bool:
        return bool(self.session.lost) or not all(p.alive for p in self.runner_pods)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pods = Pods(root, root / "logs", heartbeat_timeout=30.0)  # the loop idles between cases
        try:
            soak = Soak(pods, root, args.seed)
            deadline = time.monotonic() + args.minutes * 60
            case = 0
            while time.monotonic() < deadline:
                case += 1
                which = ("kernel", "kernel", "rpc", "rpc", "job")[case % 5]
                edits = random_edits(rng, rng.randint(1, 6))
                try:
                    if which == "kernel":
                        soak.kernel_case(rng, edits)
                    elif which == "job":
                        soak.job_case(case, edits)
                    else:
                        soak.rpc_case(edits)
                except Exception:
                    failures.append(f"case {case} ({which}, seed {args.seed}): {traceback.format_exc()}")
                    print(f"FAILED case {case} ({which}):\n{traceback.format_exc()}", flush=True)
                    if which == "job" and soak.runners_lost():
                        soak.start_runners()
        finally:
            pods.close()
    counts = soak.counts
    total = sum(v for k, v in counts.items() if k != "rpc orderly pod exits")
    print(f"fuzz_soak: {total} cases, {len(failures)} failed: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
