"""scheduler/pods/slurm.py: the pods of a Slurm step, read from its environment alone."""

from __future__ import annotations

import pytest

from common.errors import UserError
from scheduler.pods import slurm


@pytest.mark.parametrize("text,names", [
    ("localhost", ["localhost"]),
    ("a,b", ["a", "b"]),
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("x,gpu[1,3],y[009-010]", ["x", "gpu1", "gpu3", "y009", "y010"]),
])
def test_hostlists_expand_as_slurm_writes_them(text, names):
    assert slurm.expand_hostlist(text) == names


@pytest.mark.parametrize("text,problem", [
    ("gpu[1-", "unbalanced brackets"), ("gpu]", "unbalanced brackets"), ("g[[1]]", "unbalanced"),
    ("g[a-b]", "bad range"), ("g[5-3]", "runs backwards"), (",", "names no node"),
])
def test_bad_hostlists_are_refused(text, problem):
    with pytest.raises(UserError, match=problem):
        slurm.expand_hostlist(text)


def test_tasks_per_node_repeat_counts():
    assert slurm.expand_tasks_per_node("2(x3),1", 4) == [2, 2, 2, 1]
    with pytest.raises(UserError, match="gives 2 nodes, the node list 3"):
        slurm.expand_tasks_per_node("4(x2)", 3)
    with pytest.raises(UserError, match="bad item"):
        slurm.expand_tasks_per_node("2x", 1)


def _env(**over):
    env = {"SLURM_STEP_NODELIST": "gpu[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "77",
           "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "gpu2", "SLURM_LOCALID": "1", "SLURM_PROCID": "3"}
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def test_every_task_derives_the_same_pods_and_its_own_place():
    layouts = [slurm.layout_from_env(_env(SLURMD_NODENAME=node, SLURM_LOCALID=str(local),
                                          SLURM_PROCID=str(rank)))
               for rank, (node, local) in enumerate([("gpu1", 0), ("gpu1", 1), ("gpu2", 0), ("gpu2", 1)])]
    assert len({layout.pods for layout in layouts}) == 1
    base = slurm.derived_base_port(77, 0)
    assert [p.address() for p in layouts[0].pods] == [f"gpu1:{base}", f"gpu1:{base + 1}",
                                                      f"gpu2:{base}", f"gpu2:{base + 1}"]
    assert [layout.mine for layout in layouts] == list(layouts[0].pods)
    assert [layout.runs_scheduler for layout in layouts] == [True, False, False, False]


def test_derived_ports_depend_on_job_and_step_and_stay_in_range():
    bases = {slurm.derived_base_port(job, step) for job in range(1, 200) for step in range(3)}
    assert len(bases) > 300  # different steps mostly get different blocks
    assert all(slurm.PORT_LOW <= b and b + slurm.BLOCK <= slurm.PORT_LOW + slurm.PORT_BLOCKS * slurm.BLOCK
               for b in bases)


def test_reserved_ports_and_an_explicit_base_win():
    assert slurm.layout_from_env(_env(SLURM_STEP_RESV_PORTS="12000-12001")).base_port == 12000
    explicit = slurm.layout_from_env(_env(SLURM_STEP_RESV_PORTS="12000-12001"), base_port=30000)
    assert explicit.base_port == 30000
    with pytest.raises(UserError, match="holds 1 ports, but a node runs 2 tasks"):
        slurm.layout_from_env(_env(SLURM_STEP_RESV_PORTS="12000"))
    with pytest.raises(UserError, match="must lie in 1..65535"):
        slurm.layout_from_env(_env(), base_port=65535)


def test_the_node_id_stands_in_for_the_node_name_and_job_variables_fall_back():
    layout = slurm.layout_from_env(_env(SLURMD_NODENAME=None, SLURM_NODEID="1", SLURM_STEP_NODELIST=None,
                                        SLURM_JOB_NODELIST="gpu[1-2]"))
    assert layout.node == "gpu2"


def test_outside_a_job_step_says_so():
    with pytest.raises(UserError, match=r"not inside a Slurm job step: \$SLURM_STEP_NODELIST is not set"):
        slurm.layout_from_env({})
    with pytest.raises(UserError, match="SLURM_LOCALID=2, but node gpu2 runs 2 tasks"):
        slurm.layout_from_env(_env(SLURM_LOCALID="2"))
