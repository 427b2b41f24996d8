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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    sources = [p.read_text() for p in sorted((REPO / "examples").rglob("*.phk"))]
    counts: Counter = Counter()
    failures: list[str] = []
    reasons: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pods = Pods(root, root / "logs", heartbeat_timeout=30.0)  # the loop idles between cases
        try:
            data = np.random.default_rng(args.seed)
            for name in "ab":
                np.save(root / f"{name}.npy", data.standard_normal(1024).astype(np.float32))
            valid_job = make_job(root, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"}, name="valid")
            valid = valid_job.read_bytes()
            saved = snapshot(root)
            runner_pods = pods.start(2)
            session = pods.session(runner_pods)
            target = pods.start(1)[0]
            rpc_job = make_job(root, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"}, name="rpc")
            stream = record_client_stream(pods, rpc_job, root, pods.healthy()[0].address)
            deadline = time.monotonic() + args.minutes * 60
            case = 0
            while time.monotonic() < deadline:
                case += 1
                which = ("kernel", "kernel", "rpc", "rpc", "job")[case % 5]
                edits = random_edits(rng, rng.randint(1, 6))
                try:
                    if which == "kernel":
                        text = mutate_source(rng.choice(sources), edits)
                        counts[f"kernel {check_kernel_source(text)}"] += 1
                    elif which == "job":
                        mutated = mutate_bytes(valid, edits)
                        try:
                            verdict = judge_job_bytes(mutated, root,
                                                      lambda p, s=session: pods.run(s, p, timeout=60))
                        finally:
                            restore(root, saved)
                        counts[f"job {verdict.outcome}"] += 1
                        if verdict.outcome == "failed" and verdict.detail not in reasons:
                            reasons.add(verdict.detail)
                            print(f"case {case}: job failed with a reason: {verdict.detail}", flush=True)
                        if session.lost:  # a runner pod died under a mutated job: keep the evidence
                            kept = Path(tempfile.gettempdir()) / f"fuzz-soak-case-{args.seed}-{case}.capnp"
                            kept.write_bytes(mutated)
                            tails = "\n".join(p.log.read_text()[-1500:] for p in runner_pods)
                            raise AssertionError(f"runner pods lost: {session.lost}; job in {kept}\n{tails}")
                    else:
                        send_raw(target.address, mutate_bytes(stream, edits), timeout=3.0)
                        counts["rpc sent"] += 1
                        if not target.alive:
                            code = pods.wait_exit(target, 5)
                            log = target.log.read_text()
                            if code != 0 or not ("shutdown requested" in log or "connection dropped" in log):
                                raise AssertionError(f"pod died with code {code}: {log[-1500:]}")
                            counts["rpc orderly pod exits"] += 1
                            target = pods.start(1)[0]
                except Exception:
                    failures.append(f"case {case} ({which}, seed {args.seed}): {traceback.format_exc()}")
                    print(f"FAILED case {case} ({which}):\n{traceback.format_exc()}", flush=True)
                    if which == "job" and (session.lost or not all(p.alive for p in runner_pods)):
                        runner_pods = pods.start(2)
                        session = pods.session(runner_pods)
        finally:
            pods.close()
    total = sum(v for k, v in counts.items() if k != "rpc orderly pod exits")
    print(f"fuzz_soak: {total} cases, {len(failures)} failed: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
