"""Issue 36's table on a GPU: every row (benchmarks/issue36_rows.py) side by side with its anchor
in the same process (torch: cuBLAS, cuDNN SDPA), CUDA events, the median of alternated rounds,
and each row's first call (a cold PHOBOS_CACHE_DIR: tune + compile, with its progress lines)
and cached call (a new Kernel over the warm cache: no tuning, no NVRTC).

    PYTHONPATH=. pytest benchmarks/test_issue36_table.py --benchmark-only \
        --benchmark-json benchmarks/results/<device>/issue36-pytest-benchmark.json

The table (markdown and JSON) goes to $PHOBOS_ISSUE36_OUT (a folder), by default
benchmarks/results/<device>/ (device: the GPU's name, lower case, dashes). On the CPU only
test_every_row_binds_on_cpu and test_the_table_renders run.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import statistics
import time
from pathlib import Path

import pytest

from benchmarks import gpu_timing
from benchmarks.issue36_rows import ROWS, Row, render_table

ROUNDS = 6  # alternated rounds of (phobos, anchor), each the mean of REPS launches
REPS = 5
RESULTS: list[dict] = []


def _gpu_missing() -> bool:
    try:
        import cupy
        import torch

        return cupy.cuda.runtime.getDeviceCount() < 1 or not torch.cuda.is_available()
    except Exception:  # no cupy, no torch or no driver
        return True


gpu = [pytest.mark.gpu, pytest.mark.skipif(_gpu_missing(), reason="needs a GPU with cupy and torch")]


def test_every_row_binds_on_cpu():
    """Each row's kernel parses, checks and binds at its sizes at some @autotune point."""
    from compiler.frontend import load as frontend
    from compiler.frontend.binding import bind

    for row in ROWS:
        kernel = frontend.select_kernel(frontend.load_text(row.text()), None)
        point = {d.name: d.values[0] for d in kernel.autotune.dims} if kernel.autotune else {}
        bind(kernel, row.dims, None, point)
        assert row.flops() > 0 and row.kind in OPERANDS, row.name


def test_the_gqa_row_is_causal_gqa_attention_on_cpu():
    """The one kernel of the table not in examples/ (causal attention, 2 query heads per K/V
    head), run by the reference interpreter against float64 numpy: bf16 P, so a few 1e-3."""
    import ml_dtypes
    import numpy as np

    import phobos
    from benchmarks.issue36_rows import CAUSAL_GQA

    kernel = phobos.from_source(CAUSAL_GQA).bind(tiles={"BR": 64, "BC": 32}, autotune=False)
    heads, kv_heads, n, d = 4, 2, 96, 16
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(ml_dtypes.bfloat16)
               for s in ((heads, n, d), (kv_heads, n, d), (kv_heads, n, d)))
    o = np.zeros((heads, n, d), ml_dtypes.bfloat16)
    kernel(q, k, v, o, 1 / math.sqrt(d))
    for h in range(heads):
        g = h // (heads // kv_heads)
        s = q[h].astype(np.float64) @ k[g].astype(np.float64).T / math.sqrt(d)
        s[np.triu_indices(n, 1)] = -np.inf
        p = np.exp(s - s.max(1, keepdims=True))
        expected = (p / p.sum(1, keepdims=True)) @ v[g].astype(np.float64)
        assert np.abs(o[h].astype(np.float64) - expected).max() < 2e-2, h


def test_the_table_renders():
    result = {"name": ROWS[0].name, "anchor": ROWS[0].anchor, "phobos_ms": 2.0, "anchor_ms": 1.0,
              "target": 0.95, "tflops": 1.0, "first_call_s": 3.0, "cached_call_ms": 4.0, "progress_lines": 7}
    table = render_table("GPU X", [result, dict(result, anchor_ms=3.0)])
    lines = table.splitlines()
    assert lines[0] == "# Issue 36 rows on GPU X" and len(lines) == 6
    assert "| 0.500x (below) | 0.95x |" in lines[4] and "| 1.500x | 0.95x |" in lines[5]


# ---- on a GPU -----------------------------------------------------------------------------------

def _randn(torch, *shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def _matmul(row: Row, torch, dtype, out_dtype, tf32: bool, scalars=()):
    d = row.dims
    a, b = _randn(torch, d["M"], d["K"], dtype=dtype), _randn(torch, d["K"], d["N"], dtype=dtype)
    c = torch.empty(d["M"], d["N"], device="cuda", dtype=out_dtype)

    def anchor():
        torch.backends.cuda.matmul.allow_tf32 = tf32
        return torch.matmul(a, b)

    return (a, b, c, *scalars), c, anchor


def _linear_relu(row: Row, torch):
    d = row.dims
    x = _randn(torch, d["M"], d["K"], dtype=torch.bfloat16)
    w = _randn(torch, d["K"], d["N"], dtype=torch.bfloat16)
    bias = _randn(torch, d["N"], dtype=torch.bfloat16)
    y = torch.empty(d["M"], d["N"], device="cuda", dtype=torch.bfloat16)
    return (x, w, bias, y), y, lambda: torch.relu(torch.addmm(bias, x, w))


def _attention(row: Row, torch, causal: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    d = row.dims
    kv_heads = d.get("HKV", d["H"])
    q = _randn(torch, d["H"], d["N"], d["D"], dtype=torch.bfloat16)
    k, v = (_randn(torch, kv_heads, d["N"], d["D"], dtype=torch.bfloat16) for _ in range(2))
    o = torch.empty_like(q)
    scale = 1.0 / math.sqrt(d["D"])

    def anchor():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal, scale=scale,
                                                enable_gqa=kv_heads != d["H"])[0]

    return (q, k, v, o, scale), o, anchor


OPERANDS = {
    "matmul_bf16": lambda row, torch: _matmul(row, torch, torch.bfloat16, torch.float32, False),
    "matmul_tf32": lambda row, torch: _matmul(row, torch, torch.float32, torch.float32, True),
    "matmul_f32": lambda row, torch: _matmul(row, torch, torch.float32, torch.float32, False, (1.0, 0.0)),
    "linear_relu": _linear_relu,
    "attention": lambda row, torch: _attention(row, torch, False),
    "attention_causal_gqa": lambda row, torch: _attention(row, torch, True),
}


def _events_ms(fn, torch) -> float:
    return gpu_timing.events_ms(fn, torch, REPS)


def _wall(fn, torch) -> float:
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def _write_table() -> None:
    """The table so far (markdown and JSON), rewritten after each row: a call cut at its time cap
    keeps the rows it finished."""
    import torch

    device = torch.cuda.get_device_name()
    slug = device.lower().replace(" ", "-")
    folder = Path(os.environ.get("PHOBOS_ISSUE36_OUT") or Path(__file__).parent / "results" / slug)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"issue36-{datetime.date.today().isoformat()}"
    stem.with_suffix(".md").write_text(render_table(device, RESULTS), encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps({"device": device, "rows": RESULTS}, indent=1) + "\n")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
@pytest.mark.gpu
@pytest.mark.skipif(_gpu_missing(), reason="needs a GPU with cupy and torch")
def test_row_against_its_anchor(row, benchmark, tmp_path, monkeypatch, capfd):
    import torch

    import phobos

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path / "cache"))  # cold: this row tunes
    monkeypatch.delenv("PHOBOS_TUNE_QUIET", raising=False)
    args, out, anchor = OPERANDS[row.kind](row, torch)
    kernel = phobos.from_source(row.text())
    capfd.readouterr()
    first_s = _wall(lambda: kernel(*args), torch)
    tuner = [line for line in capfd.readouterr().err.splitlines() if line.startswith("tune ")]
    progress = [line for line in tuner if ": point " in line]  # the others: each tuning's summary
    fresh = phobos.from_source(row.text())  # a new Kernel: the disk caches, as a new process
    cached_ms = _wall(lambda: fresh(*args), torch) * 1e3
    expected = anchor().float()
    err = float((out.float() - expected).norm() / expected.norm())
    ours, theirs = [], []
    for _ in range(ROUNDS):
        ours.append(_events_ms(lambda: kernel(*args), torch))
        theirs.append(_events_ms(anchor, torch))
    phobos_ms, anchor_ms = statistics.median(ours), statistics.median(theirs)
    benchmark.pedantic(lambda: (kernel(*args), torch.cuda.synchronize()), rounds=5, iterations=1)
    result = {"name": row.name, "anchor": row.anchor, "phobos_ms": phobos_ms, "anchor_ms": anchor_ms,
              "ratio": anchor_ms / phobos_ms, "target": row.target,
              "tflops": row.flops() / (phobos_ms / 1e3) / 1e12, "first_call_s": first_s,
              "cached_call_ms": cached_ms, "progress_lines": len(progress), "rel_err": err, "dims": row.dims,
              "tune_lines": progress,  # each candidate's point, schedule and time (the .json only)
              "tune_summary": [line for line in tuner if line not in progress]}  # where the seconds went
    benchmark.extra_info.update(result)
    RESULTS.append(result)
    _write_table()
    assert err < 2e-2, (row.name, err)  # bf16 outputs and TF32 products: a few 1e-3
