"""The front end's last stage: `bind`, one checked kernel at concrete sizes, with its dump."""

from __future__ import annotations

import io

from compiler import pipeline
from compiler.frontend.load import load_text

SOURCE = """@autotune(BLOCK in [128, 256])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""


def test_the_front_end_lists_parse_check_and_bind():
    assert pipeline.FRONT_END_STAGES == ("parse", "check", "bind")
    assert pipeline.stage_names()[:2] == pipeline.FRONT_END_STAGES[:2]


def test_bind_before_and_expected():
    kernel = load_text(SOURCE, "add.phk").kernel()  # before: checked, no sizes
    out = io.StringIO()
    binding = pipeline.bind_stage(kernel, {"N": 1000}, {"BLOCK": 256}, dump="bind", out=out)
    assert dict(binding.dims) == {"N": 1000}
    assert dict(binding.tile_values) == {"BLOCK": 256}
    assert binding.grid == (4,)  # ceil(1000 / 256)
    assert out.getvalue() == "=== after bind ===\ndims: N=1000\ntile values: BLOCK=256\nCTA grid: 4\n"


def test_bind_dumps_only_when_asked(capsys, monkeypatch):
    kernel = load_text(SOURCE, "add.phk").kernel()
    monkeypatch.delenv("PHOBOS_DUMP_STAGES", raising=False)
    pipeline.bind_stage(kernel, {"N": 512})
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PHOBOS_DUMP_STAGES", "check,bind")
    pipeline.bind_stage(kernel, {"N": 512})
    assert "=== after bind ===\ndims: N=512\ntile values: BLOCK=128\nCTA grid: 4" in capsys.readouterr().err
