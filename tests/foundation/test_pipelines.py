"""Every pipeline of phobos is one protocol (common/pipeline.py): a visible list of named Stages
run by run_stages. A new pipeline written as its own loop over (name, function) pairs, with its own
stop-after and dump code, is what this catches: the lists below are the project's pipelines."""

from __future__ import annotations

from common.pipeline import Stage
from compiler import pipeline
from compiler.cluster import build  # registers the cluster stages
from compiler.cuda import stages
from scheduler.jobs import prepare

PIPELINES = {
    "front end": pipeline.STAGES,
    "CUDA": stages.STAGES,
    "cluster": pipeline.cluster_stages(),
    "job checks": prepare.PREPARE_CHECKS,
    "new-job checks": prepare.NEW_JOB_CHECKS,
}


def test_every_pipeline_is_a_list_of_named_stages():
    assert build.compile_cluster  # the import above is for its registrations
    for label, stage_list in PIPELINES.items():
        assert stage_list and all(isinstance(s, Stage) and callable(s.run) for s in stage_list), label
        assert len({s.name for s in stage_list}) == len(stage_list), f"{label}: a stage name repeats"


def test_the_job_checks_are_one_visible_list():
    assert [s.name for s in prepare.PREPARE_CHECKS] == ["kernel", "dims against files", "compile", "storage"]
    assert [s.name for s in prepare.NEW_JOB_CHECKS] == [
        "kernel", "search space", "dims against files", "compile", "files"]


def test_no_other_module_loops_over_its_own_stage_pairs():
    """The runner is the one place that steps through stages, calls after_each and honours until."""
    import ast

    from common.paths import REPO_ROOT

    loops = []
    for package in ("common", "compiler", "phobos", "pod", "scheduler", "schemas"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path == REPO_ROOT / "common" / "pipeline.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.For) and "STAGES" in ast.unparse(node.iter):
                    body = ast.unparse(node)
                    if "until" in body:
                        loops.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not loops, "stage loops outside common/pipeline.run_stages: " + ", ".join(loops)
