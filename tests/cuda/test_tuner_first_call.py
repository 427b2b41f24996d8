"""The first call's tuner on CPU: the cache's keys and buckets, corrupted entries, the model that
prunes before anything is compiled, the parallel compile pool (real NVRTC), progress lines.
What needs a GPU (timing) is in benchmarks/first_call.py and the -m gpu tests."""

from __future__ import annotations

import json

import pytest
from cuda_cases import load_example

from common import log
from compiler.cuda import compiled, launch
from compiler.cuda.schedule import DEFAULT, Schedule
from compiler.cuda.tuning import autotune
from compiler.cuda.tuning import cache as tune_cache
from compiler.cuda.tuning import model as tune_model
from compiler.cuda.tuning import pool as compile_pool
from compiler.cuda.tuning import timing as tune_timing
from compiler.frontend import load as frontend

DIMS = {"M": 4096, "N": 4096, "K": 4096}
POINT = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(autotune.RETUNE_ENV, raising=False)
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    return tmp_path


def _no_compile(monkeypatch):
    """Fail the test at any codegen, compile or timing: a cache hit must do none of them."""

    def compiles(*args, **kwargs):
        raise AssertionError("a cache hit compiled or tuned")

    monkeypatch.setattr(autotune.stages, "run", compiles)
    monkeypatch.setattr(compile_pool, "build", compiles)
    monkeypatch.setattr(compiled, "generate_source", compiles)
    monkeypatch.setattr(autotune, "tuning_inputs", compiles)


def test_shape_buckets_join_near_sizes_and_keep_small_dims_exact():
    assert tune_cache.shape_bucket(4000) == tune_cache.shape_bucket(4096) == tune_cache.shape_bucket(5000)
    assert tune_cache.shape_bucket(4096) != tune_cache.shape_bucket(8192)
    assert tune_cache.shape_bucket(6000) == tune_cache.shape_bucket(8192)
    assert tune_cache.shape_bucket(64) != tune_cache.shape_bucket(80)  # a head's width shapes the code
    k = load_example("matmul_bf16.phk")
    near = {"M": 4000, "N": 4096, "K": 4500}
    assert autotune.cache_key(k, DIMS, "GPU X") != autotune.cache_key(k, near, "GPU X")
    assert (autotune.cache_key(k, DIMS, "GPU X", bucket=True)
            == autotune.cache_key(k, near, "GPU X", bucket=True))
    assert (autotune.cache_key(k, DIMS, "GPU X", bucket=True)
            != autotune.cache_key(k, DIMS, "GPU Y", bucket=True))
    key = autotune.cache_key(k, DIMS, "GPU X")
    assert "nvrtc" in key and "driver" in key and "GPU X" in key


def test_a_near_size_reuses_a_tuning_without_compiling(cache_dir, monkeypatch):
    k = load_example("matmul_bf16.phk")
    keys = autotune._keys(k, DIMS, "GPU X", False, 90)
    tune_cache.store(keys, DIMS, POINT, 1.5, Schedule(stages=4, wgmma=True))
    _no_compile(monkeypatch)
    for dims in (DIMS, {"M": 4000, "N": 4096, "K": 3500}):
        res = autotune.tune(k, dims, cc=90)
        assert res.cached and res.best == POINT and res.schedule == Schedule(stages=4, wgmma=True)
    far = {"M": 8192, "N": 8192, "K": 8192}
    assert autotune.cached_result(k, far, cc=90) is None
    with pytest.raises(AssertionError, match="compiled or tuned"):
        autotune.tune(k, far, cc=90)  # another bucket: tuned
    monkeypatch.setenv(autotune.RETUNE_ENV, "1")
    with pytest.raises(AssertionError, match="compiled or tuned"):
        autotune.tune(k, DIMS, cc=90)  # asked to tune again over the cached winner


def test_a_bucket_entry_whose_tiles_do_not_fit_the_new_size_is_not_reused(cache_dir):
    k = load_example("matmul.phk")  # @aligned(M = TILE_M, ...): 4000 is no multiple of 256
    point = {"TILE_M": 256, "TILE_N": 32, "TILE_K": 4}
    tune_cache.store(autotune._keys(k, DIMS, "GPU X", False, 90), DIMS, point, 2.0, DEFAULT)
    assert autotune.cached_result(k, DIMS, cc=90).best == point
    assert autotune.cached_result(k, {"M": 4000, "N": 4096, "K": 4096}, cc=90) is None


@pytest.mark.parametrize("entry", [
    "garbage",
    {"ms": 1.0},
    {"best": {"TILE_M": 128}, "ms": 1.0},
    {"best": {**POINT, "TILE_M": 96}, "ms": 1.0},
    {"best": POINT, "ms": "fast"},
    {"best": POINT, "ms": 1.0, "schedule": {"stages": "four"}},
    {"best": POINT, "ms": 1.0, "schedule": {"no_such_field": 1}},
])
def test_a_corrupted_entry_warns_and_is_rebuilt(cache_dir, capsys, entry):
    log.configure("warning")
    k = load_example("matmul_bf16.phk")
    keys = autotune._keys(k, DIMS, "GPU X", False, 90)
    autotune._write_cache({keys[0]: entry})
    assert autotune.cached_result(k, DIMS, cc=90) is None
    err = capsys.readouterr().err
    assert "corrupted" in err and "matmul_bf16" in err
    tune_cache.store(keys, DIMS, POINT, 1.0, DEFAULT)  # what tune does after timing again
    assert autotune.cached_result(k, DIMS, cc=90).best == POINT
    assert json.loads(autotune.cache_path().read_text())[keys[0]]["dims"] == DIMS


MODEL_KERNEL = """
@autotune(TM in [64, 128, 256], TN in [64, 128, 256])
kernel mm(A: tensor<bf16>[M, K], B: tensor<bf16>[K, N], C: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, 64) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ 64], B[kt :+ 64, ctx.block.y * TN :+ TN])
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc
}
"""


def test_the_model_prunes_what_cannot_fit_before_any_compile(monkeypatch):
    k = frontend.select_kernel(frontend.load_text(MODEL_KERNEL), None)

    def compiles(*args, **kwargs):
        raise AssertionError("the model compiled")

    monkeypatch.setattr(compile_pool, "build", compiles)
    cands = [(p, DEFAULT) for p in autotune.search_points(k)]
    kept, pruned = autotune._model_pruned(k, DIMS, cands, False, 90, rank=False)
    assert not pruned and kept == cands  # hard limits only: every one of these fits an H100
    # 256 x 256 over 256 threads: codegen refuses it, so it is left to the compile to name
    assert ({"TM": 256, "TN": 256}, DEFAULT) in kept
    spills = tune_model.Estimate(1024, 128, 64, 256, 1, 0.5, 128.0)  # 65536 f32 over 128 threads
    assert "accumulator registers" in spills.refusal(90)
    assert "shared memory" in tune_model.Estimate(300 * 1024, 128, 64, 64, 1, 0.5, 64.0).refusal(90)


def test_the_model_ranks_within_a_schedule_and_keeps_the_best():
    k = frontend.select_kernel(frontend.load_text(MODEL_KERNEL), None)
    cands = [(p, DEFAULT) for p in autotune.search_points(k)]
    kept, pruned = autotune._model_pruned(k, DIMS, cands, False, 90, rank=True)
    assert len(kept) >= tune_model.MIN_KEPT and ({"TM": 128, "TN": 128}, DEFAULT) in kept
    assert ({"TM": 64, "TN": 64}, DEFAULT) not in kept  # 1/4 the FLOPs per byte of 128x128
    assert any("score" in reason for _, reason in pruned)
    # the waves term: a grid of 33 CTAs on 132 multiprocessors leaves 3/4 of them idle
    est = tune_model.Estimate(0, 256, 33, 64, 1, 33 / 132, 100.0)
    assert est.score() == pytest.approx(0.25)
    assert tune_model.Estimate(0, 256, 264, 64, 1, 2.0, 100.0).score() == pytest.approx(1.0)


def test_the_compile_pool_matches_an_in_process_compile(cache_dir):
    k = frontend.select_kernel(frontend.load_text(MODEL_KERNEL), None)
    dims = {"M": 256, "N": 256, "K": 128}
    tasks = [(k, dims, {"TM": 64, "TN": tn}, DEFAULT, False, 90) for tn in (64, 128)]
    tasks.append((k, dims, {"TM": 256, "TN": 256}, Schedule(threads=33), False, 90))  # refused
    parallel = compile_pool.build_all(tasks, workers=2)
    serial = compile_pool.build_all(tasks, workers=1)
    assert [c.ptx if c else why for c, why in parallel] == [c.ptx if c else why for c, why in serial]
    assert parallel[0][0].entry == "phobos_mm" and parallel[2][0] is None and parallel[2][1]


def test_the_pool_hands_each_compiled_candidate_to_then_and_a_refusal_takes_its_place(cache_dir):
    """The tuner loads each candidate as its worker sends it (then=the load): then() sees every
    compiled candidate once, none that did not compile, and what it refuses is (None, why)."""
    k = frontend.select_kernel(frontend.load_text(MODEL_KERNEL), None)
    dims = {"M": 256, "N": 256, "K": 128}
    tasks = [(k, dims, {"TM": 64, "TN": tn}, DEFAULT, False, 90) for tn in (64, 128, 256)]
    tasks.append((k, dims, {"TM": 256, "TN": 256}, Schedule(threads=33), False, 90))  # refused
    serial = compile_pool.build_all(tasks, workers=1)
    refused_ptx = serial[1][0].ptx
    seen = []

    def then(compiled):
        seen.append(compiled.ptx)
        return "load failed: made up" if compiled.ptx == refused_ptx else None

    loaded = compile_pool.build_all(tasks, workers=2, then=then)
    assert sorted(seen) == sorted(c.ptx for c, _ in serial if c is not None)
    assert loaded[1] == (None, "load failed: made up")
    assert [loaded[i][0].ptx for i in (0, 2)] == [serial[i][0].ptx for i in (0, 2)]
    assert loaded[3] == serial[3] and loaded[3][0] is None


def test_a_worker_that_breaks_off_leaves_the_rest_of_its_tasks_here(cache_dir, monkeypatch, tmp_path):
    """A worker process that sends one result and dies: its other tasks are compiled here, and
    every result is the one an in-process compile gives."""
    k = frontend.select_kernel(frontend.load_text(MODEL_KERNEL), None)
    dims = {"M": 256, "N": 256, "K": 128}
    tasks = [(k, dims, {"TM": tm, "TN": tn}, DEFAULT, False, 90) for tm in (64, 128) for tn in (64, 128)]
    script = tmp_path / "one_then_die.py"
    script.write_text("import pickle, sys\nfrom compiler.cuda.tuning import pool\n"
                      "tasks = pickle.loads(sys.stdin.buffer.read())\n"
                      "pickle.dump(pool.build(tasks[0]), sys.stdout.buffer)\nsys.exit(3)\n")
    monkeypatch.setattr(compile_pool, "WORKER", (str(script),))
    here = []
    real_build = compile_pool.build
    monkeypatch.setattr(compile_pool, "build", lambda task: here.append(task) or real_build(task))
    broken = compile_pool.build_all(tasks, workers=2)
    assert len(here) == 2  # each worker's second task; their first came from the worker
    serial = [real_build(t) for t in tasks]
    assert [c.ptx for c, _ in broken] == [c.ptx for c, _ in serial]


def test_progress_line_names_the_point_its_time_and_the_best():
    line = autotune.progress_line("mm", 3, 12, {"TM": 128, "TN": 64}, DEFAULT, 1.234, 1.1)
    assert line == f"tune mm: point 3/12 {{TM=128,TN=64}} {DEFAULT.key()} 1.234 ms (best 1.100 ms)"


F32_KERNEL = """
@autotune(TM in [32, 64], TN in [32])
kernel mmf(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, 16) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ 16], B[kt :+ 16, ctx.block.y * TN :+ TN])
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc
}
"""


def test_a_cached_call_runs_neither_the_tuner_nor_nvrtc(cache_dir, monkeypatch, capsys):
    """The user's path (phobos Kernel: tiles and schedule, then the PTX), first call then a
    cached one in a fresh process's state: the first compiles each candidate once (in the
    pool's processes, into the on-disk PTX cache), times each with one progress line on stderr
    and stores the winner; the cached call reads the tuning and the winner's PTX from disk with
    no timing and no NVRTC."""
    import phobos
    from compiler.cuda import nvrtc

    monkeypatch.delenv(autotune.QUIET_ENV, raising=False)
    monkeypatch.setenv("PHOBOS_CUDA_WIDE_BLOCKS", "0")  # the two CUDA-core schedules the times below are for
    monkeypatch.setattr(nvrtc, "_cache", {})
    monkeypatch.setattr(autotune, "tuning_inputs", lambda kernel, env: (None, None))
    # made up (no GPU): each point at the two CUDA-core schedules (single and double-buffered
    # shared operands), then the two best again in the grouped CTA order; the second point's
    # double-buffered candidate wins
    times = iter([4.0, 3.0, 2.0, 1.0, 5.0, 6.0])
    monkeypatch.setattr(launch, "current_device", lambda: 0)
    monkeypatch.setattr(launch, "load_refusal", lambda compiled, device: None)
    monkeypatch.setattr(autotune, "time_launch", lambda compiled, arrays, scalars, best: (next(times), 7))
    shapes = {"A": (256, 128), "B": (128, 256), "C": (256, 256)}
    (first,) = phobos.from_source(F32_KERNEL)._compiled(shapes, 90)[1].kernels  # too short a loop to split
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.startswith("tune mmf: point ")]
    (summary,) = [line for line in err if line.startswith("tune mmf:") and line not in lines]
    assert summary.startswith("tune mmf: 6 candidates timed (0 cut after 2 launches), 0 pruned; inputs ")
    assert ", compile+load " in summary and ", time " in summary
    assert [line.split(" {")[0] for line in lines] == [f"tune mmf: point {k}/4" for k in range(1, 5)] + [
        "tune mmf: point 1/2", "tune mmf: point 2/2"]
    assert lines[0].endswith("4.000 ms (best 4.000 ms)") and lines[3].endswith("1.000 ms (best 1.000 ms)")
    assert [line.split("} ")[1].split(" ")[0] for line in lines] == [
        "t0-wm0-s3-row", "t0-wm0-s3-row-db", "t0-wm0-s3-row", "t0-wm0-s3-row-db",
        "t0-wm0-s3-grouped8-db", "t0-wm0-s3-grouped8"]
    assert len(list((cache_dir / "ptx").glob("*.ptx"))) == 6  # each candidate compiled once

    monkeypatch.setattr(nvrtc, "_cache", {})  # as a new process starts
    nvrtc_runs, timed = [], []
    real = nvrtc._compile
    monkeypatch.setattr(nvrtc, "_compile", lambda *a: nvrtc_runs.append(a) or real(*a))
    monkeypatch.setattr(autotune, "time_launch", lambda *a, **k: timed.append(a) or (1.0, 7))
    binding, sequence = phobos.from_source(F32_KERNEL)._compiled(shapes, 90)
    (again,) = sequence.kernels
    assert not nvrtc_runs and not timed and again.ptx == first.ptx
    assert binding.tile_values == {"TM": 64, "TN": 32}
    assert not capsys.readouterr().err  # a cached call prints nothing
    assert len(list((cache_dir / "ptx").glob("*.ptx"))) == 6


def test_a_candidate_is_timed_in_full_unless_two_launches_are_clearly_slow(monkeypatch):
    """Two warm-up launches, then the median of seven timed ones; a candidate whose first two
    timed launches are both at least 1.3x the best so far stops there (one fast launch of the
    two, or no best yet, and it is timed in full: tune_timing.time_launch)."""
    launches = []
    monkeypatch.setattr(launch, "launch", lambda *a: launches.append(a))
    for best, draws, expected in (
        (None, [3.0, 1.0, 2.0, 9.0, 2.0, 1.5, 2.5], (2.0, 7)),  # nothing to compare with
        (1.0, [3.0, 1.2, 2.0, 9.0, 2.0, 1.5, 2.5], (2.0, 7)),  # 1.2 < 1.3 x 1.0: timed in full
        (1.0, [1.3, 1.4, 2.0], (1.35, 2)),  # both at 1.3x or more: cut, their median stands
    ):
        launches.clear()
        timed = iter(draws)
        monkeypatch.setattr(tune_timing, "_timed", lambda *a, timed=timed: next(timed))
        assert tune_timing.time_launch("k", {}, {}, best=best) == pytest.approx(expected)
        assert len(launches) == 2 and next(timed, None) == (None if expected[1] == 7 else 2.0)


@pytest.mark.parametrize("env, cuts", [({}, True), ({"PHOBOS_TUNE_CUT": "1"}, True),
                                        ({"PHOBOS_TUNE_CUT": "0"}, False),
                                        ({"PHOBOS_TUNE_CUT": "1", "PHOBOS_TUNE_EXHAUSTIVE": "1"}, False)])
def test_the_timing_cut_is_asked_for_and_never_exhaustive(cache_dir, monkeypatch, env, cuts):
    """_measure hands time_launch the best so far unless PHOBOS_TUNE_CUT=0 (on by default since an
    H100 showed the cut keeps the full timing's winners), never with PHOBOS_TUNE_EXHAUSTIVE=1."""
    monkeypatch.delenv("PHOBOS_TUNE_CUT", raising=False)
    monkeypatch.delenv("PHOBOS_TUNE_EXHAUSTIVE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    bests, times = [], iter([2.0, 1.0])
    monkeypatch.setattr(launch, "current_device", lambda: 0)
    monkeypatch.setattr(launch, "load_refusal", lambda compiled, device: None)
    monkeypatch.setattr(autotune, "time_launch", lambda c, a, s, best: bests.append(best) or (next(times), 7))
    k = frontend.select_kernel(frontend.load_text(F32_KERNEL), None)
    cands = [(p, DEFAULT) for p in autotune.search_points(k)]
    dims = {"M": 256, "N": 256, "K": 128}
    timings, _ = autotune._measure(k, dims, cands, False, autotune.Bench(None, None), None)
    assert len(timings) == 2 and bests == ([None, 2.0] if cuts else [None, None])


def test_the_summary_line_names_each_stage_in_order():
    phases = tune_timing.Phases(timed=12, cut=5)
    with phases("time"):
        pass
    phases.seconds.update(inputs=0.25, **{"compile+load": 1.5})
    line = phases.summary("mm", 3)
    assert line.startswith("tune mm: 12 candidates timed (5 cut after 2 launches), 3 pruned; inputs 0.25 s, "
                           "model 0.00 s, compile+load 1.50 s, time 0.00 s; total 1.75 s")
