"""Where the pods of a Slurm job step are, read from Slurm's environment alone (no endpoint list).

Every task of `srun phobos-sched slurm JOB` computes the same layout from the variables srun gives
each task: the step's nodes (SLURM_STEP_NODELIST, a hostlist such as `gpu[01-04,07]`), the tasks on
each (SLURM_STEP_TASKS_PER_NODE, such as `4(x2),2`), the job and step ids, and its own place
(SLURMD_NODENAME or SLURM_NODEID, SLURM_LOCALID, SLURM_PROCID). Pod i of node n listens on port
`base + i` of that node, where `base` is SLURM_STEP_RESV_PORTS' first port when the step reserved
ports (`srun --resv-ports`), else derived from the job and step ids: two steps on one node rarely
share a block, and a block that is taken is reported as such. The scheduler's node numbers follow
the nodes' order in the node list, then the local ids. Pure: no sockets, no processes
(scheduler/pods/slurm_cli.py is the shell; docs/slurm.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import UserError

PORT_LOW = 20000  # derived ports lie in [PORT_LOW, PORT_LOW + PORT_BLOCKS * BLOCK)
BLOCK = 64  # ports per step and node: at most this many tasks of a step on one node
PORT_BLOCKS = 625
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_REPEAT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


@dataclass(frozen=True)
class PodPlace:
    node: str  # the node's name, as in the node list
    local_id: int  # SLURM_LOCALID of the task that runs this pod
    port: int

    def address(self, host: str | None = None) -> str:
        return f"{host or self.node}:{self.port}"


@dataclass(frozen=True)
class SlurmLayout:
    nodes: tuple[str, ...]
    tasks_per_node: tuple[int, ...]
    job_id: int
    step_id: int
    base_port: int
    node: str  # this task's node
    local_id: int  # this task's index on its node
    proc_id: int  # this task's rank in the step: 0 runs the scheduler

    @property
    def pods(self) -> tuple[PodPlace, ...]:
        return tuple(PodPlace(node, i, self.base_port + i)
                     for node, count in zip(self.nodes, self.tasks_per_node, strict=True)
                     for i in range(count))

    @property
    def mine(self) -> PodPlace:
        return PodPlace(self.node, self.local_id, self.base_port + self.local_id)

    @property
    def runs_scheduler(self) -> bool:
        return self.proc_id == 0


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist syntax: `a,b[1-3,07],rack[1-2]-n[01-02]` (zero padding kept)."""
    names: list[str] = []
    for item in _top_level_items(text):
        names.extend(_expand_item(item, text))
    if not names:
        raise UserError(f"Slurm node list {text!r} names no node")
    return names


def _top_level_items(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if depth < 0 or depth > 1:
            raise UserError(f"Slurm node list {text!r}: unbalanced brackets")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise UserError(f"Slurm node list {text!r}: unbalanced brackets")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_item(item: str, text: str) -> list[str]:
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    prefix, body, rest = item[:open_at], item[open_at + 1:close_at], item[close_at + 1:]
    tails = _expand_item(rest, text) if rest else [""]
    return [f"{prefix}{number}{tail}" for number in _expand_ranges(body, text) for tail in tails]


def _expand_ranges(body: str, text: str) -> list[str]:
    out = []
    for part in body.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise UserError(f"Slurm node list {text!r}: bad range {part!r}")
        first, last = match.group(1), match.group(2) or match.group(1)
        if int(last) < int(first):
            raise UserError(f"Slurm node list {text!r}: range {part!r} runs backwards")
        out.extend(str(n).zfill(len(first)) for n in range(int(first), int(last) + 1))
    return out


def expand_tasks_per_node(text: str, node_count: int) -> list[int]:
    """SLURM_STEP_TASKS_PER_NODE: `2(x3),1` is 2, 2, 2, 1; one count per node of the list."""
    counts: list[int] = []
    for part in text.split(","):
        match = _REPEAT.match(part.strip())
        if not match:
            raise UserError(f"SLURM_STEP_TASKS_PER_NODE {text!r}: bad item {part!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    if len(counts) != node_count:
        raise UserError(f"SLURM_STEP_TASKS_PER_NODE {text!r} gives {len(counts)} nodes, "
                        f"the node list {node_count}")
    return counts


def derived_base_port(job_id: int, step_id: int) -> int:
    """A block of BLOCK ports chosen by the job and step ids alone (every task gets the same)."""
    return PORT_LOW + ((job_id * 7919 + step_id * 104729) % PORT_BLOCKS) * BLOCK


def _reserved_base(text: str) -> tuple[int, int]:
    """SLURM_STEP_RESV_PORTS (`12000-12003` or `12000`): its first port and how many."""
    match = _RANGE.match(text.strip().split(",")[0])
    if not match:
        raise UserError(f"SLURM_STEP_RESV_PORTS {text!r}: expected FIRST-LAST")
    first = int(match.group(1))
    return first, int(match.group(2) or first) - first + 1


def _need(env: Mapping[str, str], *names: str) -> str:
    for name in names:
        if env.get(name):
            return env[name]
    raise UserError(f"not inside a Slurm job step: ${names[0]} is not set "
                    "(run this as `srun ... phobos-sched slurm JOB`, docs/slurm.md)")


def _integer(env: Mapping[str, str], *names: str) -> int:
    text = _need(env, *names)
    if not text.isdigit():
        raise UserError(f"${names[0]}={text!r}: expected a number")
    return int(text)


def layout_from_env(env: Mapping[str, str], base_port: int | None = None) -> SlurmLayout:
    """The step's layout as every task of it sees it; `base_port` overrides the derived ports."""
    nodes = tuple(expand_hostlist(_need(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST")))
    per_node = tuple(expand_tasks_per_node(
        _need(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"), len(nodes)))
    job_id = _integer(env, "SLURM_JOB_ID", "SLURM_JOBID")
    step_id = _integer(env, "SLURM_STEP_ID", "SLURM_STEPID")
    if env.get("SLURMD_NODENAME") in nodes:
        node = env["SLURMD_NODENAME"]
    else:
        index = _integer(env, "SLURM_NODEID")
        if index >= len(nodes):
            raise UserError(f"$SLURM_NODEID={index}, but the step has {len(nodes)} nodes")
        node = nodes[index]
    local_id, proc_id = _integer(env, "SLURM_LOCALID"), _integer(env, "SLURM_PROCID")
    most = max(per_node)
    if base_port is None and env.get("SLURM_STEP_RESV_PORTS"):
        base_port, reserved = _reserved_base(env["SLURM_STEP_RESV_PORTS"])
        if reserved < most:
            raise UserError(f"SLURM_STEP_RESV_PORTS {env['SLURM_STEP_RESV_PORTS']!r} holds {reserved} "
                            f"ports, but a node runs {most} tasks")
    elif base_port is None:
        if most > BLOCK:
            raise UserError(f"a node runs {most} tasks of this step, more than the {BLOCK} ports a step "
                            "gets: pass --base-port or srun --resv-ports")
        base_port = derived_base_port(job_id, step_id)
    if not 0 < base_port or base_port + most > 65536:
        raise UserError(f"--base-port {base_port}: the pods' ports must lie in 1..65535")
    here = per_node[nodes.index(node)]
    if local_id >= here:
        raise UserError(f"$SLURM_LOCALID={local_id}, but node {node} runs {here} tasks")
    return SlurmLayout(nodes, per_node, job_id, step_id, base_port, node, local_id, proc_id)
