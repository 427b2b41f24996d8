"""`//compiler -- cluster ... --verify`: the cluster program's sequential reference against the plain
kernel, both through the reference interpreter, on seeded random inputs."""

from __future__ import annotations

import numpy as np

from common.errors import UserError
from compiler.cluster.sequential import run_program
from compiler.frontend import ir
from compiler.frontend.binding import bind
from compiler.interp.interpreter import run_kernel
from schemas.program import ClusterProgram

SEED = 17


def verify(kernel: ir.Kernel, program: ClusterProgram, dims: dict[str, int], tiles: dict[str, int],
           scalars: dict[str, float]) -> str:
    missing = [s.name for s in kernel.scalars if s.name not in scalars]
    if missing:
        raise UserError(f"--verify needs every scalar: give --scalar {missing[0]}=V")
    typed = {s.name: int(scalars[s.name]) if s.dtype == "i32" else scalars[s.name] for s in kernel.scalars}
    rng = np.random.default_rng(SEED)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32)
              for t in program.tensors if t.role != "partial"}
    plain = {n: a.copy() for n, a in inputs.items()}
    run_kernel(kernel, bind(kernel, dims, tile_values=tiles or None), plain, typed)
    clustered = {n: a.copy() for n, a in inputs.items()}
    run_program(program, clustered, typed)
    lines = [f"verify (random normal inputs, seed {SEED}): the sequential reference against the plain kernel"]
    for t in program.tensors:
        if t.role in ("output", "inout"):
            diff = np.abs(clustered[t.name].astype(np.float64) - plain[t.name])
            scale = max(float(np.abs(plain[t.name]).max()), 1e-30)
            worst = diff.max()
            lines.append(f"  {t.name}: max |difference| {worst:.3g}, {worst / scale:.3g} of max |{t.name}|")
    return "\n".join(lines)
