"""The visible pipeline: stages in order, verifiers between them, dumps on request."""

from __future__ import annotations

import dataclasses
import io

import pytest

from common.paths import repo_file
from compiler import pipeline
from compiler.frontend import ir
from compiler.frontend.load import load_text

EXAMPLES = sorted(repo_file("examples").glob("*.phk"))


def test_front_end_stages_in_order():
    assert pipeline.stage_names()[:2] == ("parse", "check")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_verifiers(path):
    source = ir.Module(file=path.name, text=path.read_text())
    checked = pipeline.run_pipeline(source, until="check", verify=True, dump=False)
    assert all(k.grid for k in checked.kernels)


def test_until_stops_after_parse():
    text = (EXAMPLES[0]).read_text()
    parsed = pipeline.run_pipeline(ir.Module("a.phk", text), until="parse", dump=False)
    first_let = parsed.kernels[0].body[0]
    assert isinstance(first_let, ir.Let) and first_let.value.ty is None


def test_unknown_until_is_rejected():
    with pytest.raises(ValueError, match="no pipeline stage 'lower'"):
        pipeline.run_pipeline(ir.Module("a.phk", ""), until="lower")


def test_dump_selected_stage():
    out = io.StringIO()
    text = repo_file("examples/add.phk").read_text()
    pipeline.run_pipeline(ir.Module("add.phk", text), until="check", dump="check", out=out)
    dumped = out.getvalue()
    assert "=== after check ===" in dumped and "=== after parse ===" not in dumped
    assert "// grid: x = ceil(N / BLOCK)" in dumped


def test_dump_from_environment(monkeypatch, capsys):
    monkeypatch.setenv("PHOBOS_DUMP_STAGES", "1")
    load_text("kernel k(a: tensor<f32>[N]) {\n  a[0 :+ 4] = 1.0\n}\n", "env.phk")
    err = capsys.readouterr().err
    assert "=== after parse ===" in err and "=== after check ===" in err


def test_verifier_catches_untyped_expression():
    checked = load_text("kernel k(a: tensor<f32>[N]) {\n  let x = 1\n}\n", "v.phk")
    kernel = checked.kernels[0]
    broken_let = dataclasses.replace(kernel.body[0], value=dataclasses.replace(kernel.body[0].value, ty=None))
    broken = dataclasses.replace(checked, kernels=(dataclasses.replace(kernel, body=(broken_let,)),))
    with pytest.raises(pipeline.PipelineBug, match="untyped expression"):
        pipeline.verify_checked(broken)


def test_verifier_catches_missing_span():
    checked = load_text("kernel k(a: tensor<f32>[N]) {\n  let x = 1\n}\n", "v.phk")
    kernel = checked.kernels[0]
    broken_let = dataclasses.replace(kernel.body[0], span=ir.Span("<unknown>", 0, 0, 0, 0))
    broken = dataclasses.replace(checked, kernels=(dataclasses.replace(kernel, body=(broken_let,)),))
    with pytest.raises(pipeline.PipelineBug, match="no source span"):
        pipeline.verify_spans(broken)


def test_add_stage_runs_in_place(monkeypatch):
    monkeypatch.setattr(pipeline, "STAGES", list(pipeline.STAGES))
    monkeypatch.setattr(pipeline, "VERIFIERS", dict(pipeline.VERIFIERS))
    seen = []

    def count_kernels(module: ir.Module) -> ir.Module:
        seen.append(len(module.kernels))
        return module

    pipeline.add_stage("count", count_kernels, after="check")
    assert pipeline.stage_names()[:3] == ("parse", "check", "count")
    with pytest.raises(ValueError, match="already registered"):
        pipeline.add_stage("count", count_kernels)
    pipeline.run_pipeline(ir.Module("a.phk", EXAMPLES[0].read_text()), verify=True, dump=False)
    assert seen == [1]


def test_verifier_catches_a_dot_without_its_precision():
    module = load_text((repo_file("examples") / "matmul_tf32.phk").read_text(), "m.phk")
    pipeline.verify_checked(module)

    def with_dot_precision(precision):
        kernel = module.kernels[0]
        loop = next(s for s in kernel.body if isinstance(s, ir.For))
        update = loop.body[-1]
        changed = dataclasses.replace(update, value=dataclasses.replace(update.value, precision=precision))
        new_loop = dataclasses.replace(loop, body=(*loop.body[:-1], changed))
        body = tuple(new_loop if s is loop else s for s in kernel.body)
        return dataclasses.replace(module, kernels=(dataclasses.replace(kernel, body=body),))

    with pytest.raises(pipeline.PipelineBug, match="no resolved precision"):
        pipeline.verify_checked(with_dot_precision(None))
    wrong = ir.DotPrecision("bf16", "operands", module.kernels[0].span)
    with pytest.raises(pipeline.PipelineBug, match="precision bf16 with operands"):
        pipeline.verify_checked(with_dot_precision(wrong))
