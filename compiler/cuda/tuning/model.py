"""The first-call tuner's model: which (point, schedule) candidates are worth compiling at all.

Compiling a candidate (NVRTC) costs hundreds of milliseconds; generating its CUDA source costs a
few (codegen only, no NVRTC), and the generated source already knows the CTA's threads, its
shared memory and its grid. From those and the kernel's accumulators the model estimates, with
no compile and no GPU:

- shared memory: a CTA over the GPU's per-CTA limit cannot launch (hard prune);
- registers: the f32 accumulators a thread holds (every `var` tile, divided over the CTA's
  threads); more than ACC_REGISTER_LIMIT leaves no room for operands and addresses, so the
  code spills (hard prune);
- residency: CTAs per multiprocessor, from shared memory, threads and the estimated registers;
- waves: the grid over (multiprocessors x resident CTAs); a last wave that is mostly empty
  wastes the fraction it leaves idle (wave efficiency = waves / ceil(waves));
- bytes per FLOP: per step of a dot's reduction a CTA of accumulator tile [a, b] loads a + b
  rows and does a * b multiply-adds; the intensity a*b/(a+b) below the GPU's ridge point
  (RIDGE) leaves the tensor cores waiting on memory.

score = wave efficiency x min(1, intensity / RIDGE) x min(1, resident warps / 8): a relative
rank, not a time. `rank` keeps, within each schedule, the candidates whose score is at least
KEEP_RATIO of that schedule's best (never fewer than MIN_KEPT), and names why the others go.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.cuda import target
from compiler.frontend import ir, walk

ACC_REGISTER_LIMIT = 192  # of 255 per thread: the rest holds operands, addresses, the loop
REGISTERS_PER_SM = 65536
THREADS_PER_SM = 2048
RIDGE = 96.0  # FLOP per element loaded where an H100's tensor cores stop waiting on memory
KEEP_RATIO = 0.6
MIN_KEPT = 4
DEFAULT_SMS = 132  # an H100 SXM; the tuner passes the GPU's own count when it has one


@dataclass(frozen=True)
class Estimate:
    shared_bytes: int
    threads: int
    ctas: int
    acc_registers: int  # f32 accumulator registers per thread
    resident: int  # CTAs per multiprocessor (0: does not fit)
    waves: float
    intensity: float  # multiply-adds per element loaded, per reduction step (0: no dot)

    def refusal(self, cc: int) -> str | None:
        """Why this candidate cannot run well enough to be worth a compile, or None."""
        limit = target.shared_memory_limit(cc)
        if self.shared_bytes > limit:
            return f"model: {self.shared_bytes} bytes of shared memory, over the {limit} a CTA may have"
        if self.acc_registers > ACC_REGISTER_LIMIT:
            return (f"model: {self.acc_registers} accumulator registers per thread "
                    f"(over {ACC_REGISTER_LIMIT}: it would spill)")
        if self.resident == 0:
            return "model: not one CTA fits on a multiprocessor"
        return None

    def score(self) -> float:
        efficiency = self.waves / math.ceil(self.waves) if self.waves > 0 else 0.0
        feed = min(1.0, self.intensity / RIDGE) if self.intensity > 0 else 1.0
        warps = min(1.0, self.resident * self.threads / 32 / 8)
        return efficiency * feed * warps


def estimate(kernel: ir.Kernel, env: dict[str, int], generated, cc: int = target.DEFAULT_CC,
             sms: int = DEFAULT_SMS) -> Estimate:
    """The model's numbers for one candidate: `generated` is its codegen.Generated (source not
    compiled), `env` its binding's dims and tile values."""
    threads = math.prod(generated.block)
    ctas = math.prod(generated.grid)
    acc = sum(math.prod(s.evaluate(env) for s in shape) for shape in _accumulator_shapes(kernel))
    acc_registers = -(-acc // max(threads, 1))
    registers = min(255, acc_registers + 40) * threads  # accumulators plus a working set
    limits = [THREADS_PER_SM // max(threads, 1), REGISTERS_PER_SM // max(registers, 1)]
    if generated.shared_bytes:
        limits.append(target.shared_memory_limit(cc) // generated.shared_bytes)
    resident = max(0, min(limits))
    waves = ctas / (sms * resident) if resident else 0.0
    return Estimate(generated.shared_bytes, threads, ctas, acc_registers, resident, waves,
                    _intensity(kernel, env))


def _accumulator_shapes(kernel: ir.Kernel):
    for stmt in walk.iter_stmts(kernel.body):
        if isinstance(stmt, ir.VarDecl) and isinstance(stmt.declared, ir.TileType):
            yield stmt.declared.shape


def _intensity(kernel: ir.Kernel, env: dict[str, int]) -> float:
    """The smallest a*b/(a+b) over the kernel's 2-D accumulators (the dots' outputs), 0 without."""
    values = []
    for shape in _accumulator_shapes(kernel):
        if len(shape) == 2:
            a, b = (s.evaluate(env) for s in shape)
            values.append(a * b / (a + b))
    return min(values) if values else 0.0


def rank(candidates, estimates, cc: int, by_score: bool = True):
    """(kept, dropped): `candidates` are (point, schedule) pairs, `estimates` their Estimate or a
    str (why codegen refused it, left to the compile to report); dropped are (candidate, why).
    Without `by_score` only the hard limits drop (what cannot launch or would spill)."""
    kept, dropped, scored = [], [], {}
    for cand, est in zip(candidates, estimates, strict=True):
        why = est.refusal(cc) if isinstance(est, Estimate) else None
        if why:
            dropped.append((cand, why))
        elif isinstance(est, Estimate):
            scored.setdefault(cand[1], []).append((est.score(), cand))
        else:
            kept.append(cand)
    for rows in scored.values():
        rows.sort(key=lambda r: -r[0])
        best = rows[0][0]
        for i, (score, cand) in enumerate(rows):
            if not by_score or i < MIN_KEPT or score >= KEEP_RATIO * best:
                kept.append(cand)
            else:
                dropped.append((cand, f"model: score {score:.2f} < {KEEP_RATIO} x the best {best:.2f}"))
    order = {id(c): i for i, c in enumerate(candidates)}
    kept.sort(key=lambda c: order[id(c)])
    return kept, dropped
