"""The cluster benchmarks' own logic: cases, the bound and ratios, the numpy references against the
interpreter, the storage helpers, one tiny job through the harness, and the renderer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import cluster_cases as cc
from benchmarks.cluster_harness import (
    ClusterPool,
    drop_cache,
    kernel_path,
    read_bandwidth,
    trace_figures,
    write_problem,
)
from benchmarks.render import latest_runs, read_run, render_into_docs, replace_section, section_text, table

# ---- cases ---------------------------------------------------------------------------------------------


def test_cases_cover_the_issue():
    cases = cc.cpu_cases() + cc.gpu_cases()
    assert len({c.id for c in cases}) == len(cases)
    for device, pods in (("cpu", {1, 2, 4}), ("gpu", {1, 2})):
        mine = [c for c in cases if c.device == device]
        assert {c.pods for c in mine} == pods
        for kind in ("matmul", "attention"):
            for p in pods:
                tiles = {c.cluster_values for c in mine if c.kind == kind and c.pods == p}
                assert len(tiles) >= 3, (device, kind, p)
        assert {c.kind for c in mine} == {"matmul", "attention", "add"}


@pytest.mark.parametrize("case", cc.cpu_cases() + cc.gpu_cases(), ids=lambda c: c.id)
def test_every_case_compiles_to_a_cluster_program(case):
    """Each pinned @cluster value is in its kernel's space and the job compiles; the unit count is
    the output's super-tile count (a wrong kernel or dims would fail here, not in a long run)."""
    from compiler.cluster.build import compile_cluster
    from compiler.frontend.load import load_file

    kernel = load_file(kernel_path(case)).kernel()
    program = compile_cluster(kernel, case.problem.dim, cluster_values=dict(case.cluster_values))
    shape = cc.tensor_shapes(case.problem)[cc.output_name(case.problem)]
    values = dict(case.cluster_values)
    tiles = {"matmul": (values.get("TILE_M"), values.get("TILE_N")), "attention": (values.get("BR"), 64),
             "add": (values.get("BLOCK"),)}[case.kind]
    expected_units = int(np.prod([s // t for s, t in zip(shape, tiles, strict=True)]))
    assert len(program.units) == expected_units


def test_bytes_and_flops_by_hand():
    assert cc.input_bytes(cc.matmul(4, 8, 2)) == 4 * (4 * 2 + 2 * 8 + 4 * 8)
    assert cc.flops(cc.matmul(4, 8, 2)) == 2 * 4 * 8 * 2
    assert cc.input_bytes(cc.attention(10, 6)) == 4 * 64 * (10 + 6 + 6)
    assert cc.flops(cc.attention(10, 6)) == 4 * 10 * 6 * 64
    assert cc.input_bytes(cc.add(100)) == 800
    assert cc.bytes_touched(cc.add(100)) == 1200


# ---- the bound and the ratios ------------------------------------------------------------------------------


def test_bound_is_the_larger_of_reading_and_computing():
    storage_limited = cc.Yardsticks(anchor_s=0.5, storage_bw=1e9, input_bytes=2_000_000_000)
    assert storage_limited.read_s == pytest.approx(2.0)
    assert storage_limited.bound_s == pytest.approx(2.0)
    assert storage_limited.bound_limited_by == "storage"
    compute_limited = cc.Yardsticks(anchor_s=3.0, storage_bw=1e9, input_bytes=2_000_000_000)
    assert compute_limited.bound_s == pytest.approx(3.0)
    assert compute_limited.bound_limited_by == "compute"


def test_ratios():
    r = cc.ratios(4.0, cc.Yardsticks(anchor_s=0.5, storage_bw=1e9, input_bytes=2_000_000_000))
    assert r["ratio_to_anchor"] == pytest.approx(8.0)
    assert r["ratio_to_bound"] == pytest.approx(2.0)
    assert r["fraction_of_bound"] == pytest.approx(0.5)
    assert r["storage_read_gbps"] == pytest.approx(1.0)


# ---- the references are the language's meaning ----------------------------------------------------------


@pytest.mark.parametrize("problem", [cc.matmul(256, 256, 256), cc.attention(256, 512), cc.add(1 << 17)],
                         ids=lambda p: p.kind)
def test_reference_matches_the_interpreter(problem):
    """The float64 numpy reference that checks every benchmark run agrees with the kernel run
    whole (no @cluster) under the reference interpreter."""
    from compiler.frontend.binding import bind
    from compiler.frontend.load import load_file
    from compiler.interp.interpreter import run_kernel

    case = cc.Case(problem, (), "cpu", 1)
    kernel = load_file(kernel_path(case)).kernel()
    arrays = cc.make_inputs(problem, seed=3)
    tensors = {k: v.copy() for k, v in arrays.items()}
    run_kernel(kernel, bind(kernel, problem.dim, {k: v.shape for k, v in tensors.items()}), tensors,
               dict(problem.scalars))
    want = cc.reference(problem, arrays)
    rtol, atol = cc.tolerance(problem, want)
    np.testing.assert_allclose(tensors[cc.output_name(problem)], want, rtol=rtol, atol=atol)


def test_attention_reference_by_blocks_of_rows():
    problem = cc.attention(50, 30)
    arrays = cc.make_inputs(problem, seed=5)
    whole = cc.reference(problem, arrays, block_rows=50)
    np.testing.assert_allclose(cc.reference(problem, arrays, block_rows=7), whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["matmul", "attention", "add"])
def test_gpu_leaves_compile_to_ptx(kind):
    """NVRTC needs no GPU: every leaf of every GPU case compiles here, so the GPU run cannot
    fail on a kernel the CUDA code generator refuses."""
    from compiler.cluster.build import compile_cluster
    from compiler.cuda.compiled import compile_kernel
    from compiler.frontend.load import load_file
    from pod.backends.backend_cpu import prepare_leaf

    for case in [c for c in cc.gpu_cases() if c.kind == kind and c.pods == 1]:
        kernel = load_file(kernel_path(case)).kernel()
        program = compile_cluster(kernel, case.problem.dim, cluster_values=dict(case.cluster_values))
        for leaf in program.leaves:
            prepared = prepare_leaf(leaf)
            compiled = compile_kernel(prepared.kernel, prepared.binding)
            assert ".entry" in compiled.ptx


def test_tolerance_catches_a_wrong_tile():
    problem = cc.matmul(256, 256, 256)
    arrays = cc.make_inputs(problem)
    want = cc.reference(problem, arrays)
    got = want.astype(np.float32)
    got[:32, :32] = 0.0  # one CTA tile never written
    rtol, atol = cc.tolerance(problem, want)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# ---- storage helpers and one job through the harness ------------------------------------------------------


def test_files_reset_and_read_bandwidth(tmp_path):
    problem = cc.add(1 << 16)
    files = write_problem(tmp_path, problem, cc.make_inputs(problem))
    np.save(files.path("c"), np.zeros(1 << 16, np.float32))
    files.reset("c")
    np.testing.assert_array_equal(np.load(files.path("c")), files.arrays["c"])
    assert read_bandwidth(files.input_paths(), repeats=1) > 0
    assert read_bandwidth(files.input_paths(), repeats=1, cold=False) > 0
    drop_cache([tmp_path / "missing.npy"])  # nothing to drop: no error


def test_one_job_through_the_harness(tmp_path):
    """A real pod process, the scheduler's code, storage: the add case at its smallest size."""
    problem = cc.add(1 << 21)
    case = cc.Case(problem, (("BLOCK", 1 << 20),), "cpu", 1)
    pool = ClusterPool.open(tmp_path)
    try:
        files = write_problem(tmp_path, problem, cc.make_inputs(problem))
        files.reset("c")
        result = pool.run_job(case, files, timeout_s=60)
        assert result.ok, result.reason
        np.testing.assert_array_equal(np.load(files.path("c")), files.arrays["a"] + files.arrays["b"])
        figures = trace_figures(result.trace)
        assert figures["units"] == 2
        assert figures["bytes_loaded"] == cc.input_bytes(problem)
        assert figures["bytes_stored"] == 4 * (1 << 21)
    finally:
        pool.close()


# ---- the renderer ------------------------------------------------------------------------------------------


def fake_result(path: Path, when: str, job_s: float, quick: bool = True, device: str = "cpu") -> None:
    sticks = cc.Yardsticks(anchor_s=0.25, storage_bw=2e9, input_bytes=1_000_000_000)
    rows = []
    for pods in (1, 2):
        for tile in (512, 1024):
            info = {"case": f"{device}-matmul-{tile}-pods{pods}", "kind": "matmul", "device": device,
                    "pods": pods, "problem": "2048x2048x2048", "tile": f"TILE={tile}",
                    "cluster_values": {"TILE_M": tile}, "compute_s_busiest": 0.5,
                    "anchor": "numpy", "quick": quick, "units": 4, "bytes_loaded": 50_000_000,
                    "bytes_fetched": 0, "storage_read_warm_gbps": 3.0, **cc.ratios(job_s * pods, sticks)}
            rows.append({"name": f"test_cluster_job[{info['case']}]", "extra_info": info,
                         "stats": {"min": job_s, "median": job_s * pods, "rounds": 2}})
    rows.append({"name": "test_something_else", "extra_info": {}, "stats": {}})
    data = {"datetime": when, "machine_info": {"cpu": {"brand_raw": "Test CPU"}, "cpu_count": 2, "gpu": None},
            "commit_info": {"id": "abcdef1234567", "dirty": False}, "benchmarks": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_read_run_and_table(tmp_path):
    path = tmp_path / "m" / "Linux" / "0001_cluster.json"
    fake_result(path, "2026-11-29T10:00:00+00:00", 1.0)
    run = read_run("m", path)
    assert [r["pods"] for r in run.rows] == [1, 2, 1, 2]  # sorted by tile, then pods
    text = table(run)
    assert text.count("\n") == 1 + 4
    assert "| cpu | matmul | 2048x2048x2048 | TILE=512 | 2 | 2.000 |" in text
    # 1 pod: 1 s against a 0.25 s anchor and a 0.5 s bound (1 GB read at 2 GB/s, storage-limited)
    assert "| TILE=512 | 1 | 1.000 | numpy | 0.250 | 0.500 (storage) | 4.00 | 2.00 | 4 | 0.500 | 50 | 0 |" \
        in text
    assert read_run("m", tmp_path / "nope.json") is None


def test_latest_run_per_machine(tmp_path):
    fake_result(tmp_path / "a" / "L" / "0001_cluster.json", "2026-11-29T10:00:00+00:00", 1.0)
    fake_result(tmp_path / "a" / "L" / "0002_cluster.json", "2026-11-29T11:00:00+00:00", 3.0)
    fake_result(tmp_path / "b" / "L" / "0001_cluster.json", "2026-11-29T09:00:00+00:00", 2.0)
    runs = latest_runs(tmp_path)
    assert [(r.key, r.rows[0]["job_s"]) for r in runs] == [("a-cpu", 3.0), ("b-cpu", 2.0)]


def test_full_run_preferred_to_a_newer_quick_one(tmp_path):
    fake_result(tmp_path / "a" / "L" / "0001_cluster.json", "2026-11-29T10:00:00+00:00", 1.0, quick=False)
    fake_result(tmp_path / "a" / "L" / "0002_cluster-quick.json", "2026-11-29T11:00:00+00:00", 3.0)
    assert [r.rows[0]["job_s"] for r in latest_runs(tmp_path)] == [1.0]


def test_latest_run_per_device(tmp_path):
    """A GPU run and a later CPU-only run on one machine: both are shown."""
    fake_result(tmp_path / "a" / "L" / "0001_cluster.json", "2026-11-29T10:00:00+00:00", 1.0, device="gpu")
    fake_result(tmp_path / "a" / "L" / "0002_cluster.json", "2026-11-29T11:00:00+00:00", 3.0)
    runs = latest_runs(tmp_path)
    assert [(r.title, r.rows[0]["job_s"]) for r in runs] == [("a, cpu pods", 3.0), ("a, gpu pods", 1.0)]


def test_replace_section_keeps_other_sections():
    doc = ("# Performance\n\n## Single-GPU leaves\n\nleaf text\n\n## Cluster benchmarks\n\nold\n\n"
           "## Cluster tuner\n\nt\n")
    new = replace_section(doc, "## Cluster benchmarks\n\nnew\n")
    assert new == ("# Performance\n\n## Single-GPU leaves\n\nleaf text\n\n## Cluster benchmarks\n\nnew\n\n"
                   "## Cluster tuner\n\nt\n")
    appended = replace_section("# Performance\n\n## Single-GPU leaves\n\nx\n",
                               "## Cluster benchmarks\n\nnew\n")
    assert appended.endswith("x\n\n## Cluster benchmarks\n\nnew\n")
    assert replace_section("", "## Cluster benchmarks\n").startswith("# Performance\n")


def test_render_into_docs(tmp_path):
    fake_result(tmp_path / "results" / "m" / "L" / "0001_cluster.json", "2026-11-29T10:00:00+00:00", 1.0)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "performance.md").write_text("# Performance\n\n## Single-GPU leaves\n\nkeep me\n")
    written = render_into_docs(tmp_path / "results", docs)
    text = (docs / "performance.md").read_text()
    assert "keep me" in text and "### m, cpu pods" in text and "TILE=1024" in text
    assert docs / "performance.md" in written
    assert section_text([], {}, True).startswith("## Cluster benchmarks")
