"""`phobos-sched JOB --autotune` end to end through the command line, on local CPU pods."""

from __future__ import annotations

import numpy as np

from tests.job_files import write_add_job


def test_autotune_prints_the_table_and_runs_the_best(tmp_path, monkeypatch, capsys):
    from scheduler.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("scheduler.pods.local_pods.visible_gpus", lambda: 0)  # CPU pods even on a GPU machine
    _, want = write_add_job(tmp_path, seed=8)
    # 4096 elements: BLOCK=256 gives 16 super-tiles, 512 gives 8, 1024 gives 4; on 8 nodes the
    # last leaves 4 idle and is dropped. A huge fixed cost per launch makes the fewest launches win.
    rc = main([str(tmp_path / "add.job"), "--autotune", "--local-pods", "2", "--nodes", "2",
               "--launch-overhead", "10", "--storage-root", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "cluster tuner: 2 nodes" in out and "chosen: BLOCK=1024" in out
    assert "(add, 4 units on 2 nodes) succeeded" in out
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), want)

    rc = main([str(tmp_path / "add.job"), "--autotune", "--tune-only", "--local-pods", "1", "--nodes", "8",
               "--storage-root", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "dropped: 4 super-tile(s) for 8 nodes: 4 node(s) would get none" in out
    assert "succeeded" not in out  # --tune-only runs nothing
