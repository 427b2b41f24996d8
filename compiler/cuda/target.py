"""Which GPU a leaf's PTX is for: what its generated code needs, what the GPU is, and the NVRTC
target that joins the two. The one home of compute capabilities in the compiler.

A compute capability is written as one integer, major * 10 + minor (80 for 8.0, 86, 89, 90, 100,
120), as cupy's `Device.compute_capability` gives it.

What the code needs (`Need`) is the set of PTX features the emitters used (FEATURES): mma.sync's
bf16, f16 and TF32 shapes (with ldmatrix, from 7.5), cp.async and bf16 conversions from sm_80;
bulk tensor copies (TMA) and mbarrier transaction counts and waits from sm_90; warpgroup MMA and
`setmaxnreg` from sm_90a only, which is arch-specific: its PTX runs on a 9.0 GPU and no other.
TF32 rounding is no feature: tf32.py picks `cvt.rn.tf32.f32` or an integer sequence by
`__CUDA_ARCH__`, so the same source compiles for either.

The PTX target (`ptx_arch`): `compute_{cc}` below 9.0 (an A100 gets compute_80, an RTX 4090
compute_89), `compute_90` / `compute_90a` on 9.0 exactly as before (the H200 the figures are
measured on), and `compute_90` above it (Blackwell JIT-compiles sm_90 PTX forward; sm_90a PTX it
cannot run, so code that needs it is refused there). Without a GPU at hand (CI, `compiler ptx` on
a laptop) the target is DEFAULT_CC, the H200.

The GPU also bounds the shared memory of one CTA (`shared_memory_limit`); the emitters cut a
ring's depth to it and prune the points that exceed it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from compiler.frontend.diagnostics import CompileError

HOPPER = 90
DEFAULT_CC = HOPPER  # no GPU at hand: the H200, where every figure of docs/performance.md is measured
OLDEST_CC = 75  # the oldest GPU the toolchain still assembles for (ptxas 13 starts at sm_75)


@dataclass(frozen=True)
class Feature:
    cc: int  # the first compute capability whose PTX has it
    specific: bool  # arch-specific (sm_90a): runs on exactly that capability, not later ones
    what: str  # named in errors


FEATURES = {
    "mma.sync": Feature(80, False, "tensor cores (mma.sync, ldmatrix)"),
    "cp.async": Feature(80, False, "asynchronous copies to shared memory (cp.async)"),
    "bf16": Feature(80, False, "bf16 conversions (cvt.rn.bf16.f32)"),
    "mbarrier": Feature(90, False, "mbarrier waits and transaction counts (mbarrier.try_wait, expect_tx)"),
    "tma": Feature(90, False, "bulk tensor copies (TMA, cp.async.bulk.tensor)"),
    "wgmma": Feature(90, True, "warpgroup MMA (wgmma)"),
    "setmaxnreg": Feature(90, True, "register reallocation between warpgroups (setmaxnreg)"),
}


@dataclass(frozen=True)
class Need:
    """The lowest GPU a leaf's generated code runs on, which features set it, and where in the
    kernel an error about it points (the first tensor-core dot, a bf16 tensor; None: the kernel)."""

    features: tuple[str, ...] = ()
    span: object = field(default=None, compare=False)

    @property
    def cc(self) -> int:
        return max([OLDEST_CC, *(FEATURES[f].cc for f in self.features)])

    @property
    def specific(self) -> bool:
        return any(FEATURES[f].specific for f in self.features)

    def text(self) -> str:
        """What the code asks for, in words: `compute capability 8.0 or later (tensor cores ...)`."""
        top = [FEATURES[f].what for f in self.features
               if FEATURES[f].cc == self.cc and FEATURES[f].specific == self.specific]
        which = " exactly (sm_90a)" if self.specific else " or later"
        gpu = f"compute capability {cc_text(self.cc)}{which}"
        return f"{gpu} for {', '.join(top)}" if top else gpu


def need_of(gen) -> Need:
    """What the emit stage used (codegen.KernelGen's record of it), as a Need at the first
    tensor-core dot, else at the first bf16 tensor."""
    used = {
        "mma.sync": gen.plan.tensor_cores,
        "cp.async": gen.plan.tensor_cores,
        "bf16": gen.used.bf16 and not gen.plan.tensor_cores,  # the tensor-core prelude converts too
        "mbarrier": gen.used.pingpong or bool(gen.used.tensor_maps),
        "tma": bool(gen.used.tensor_maps),
        "wgmma": gen.used.wgmma,
        "setmaxnreg": bool(gen.loop.tma_split),
    }
    bf16 = [p.span for p in gen.plan.kernel.tensors if p.dtype == "bf16"]
    at = gen.plan.tensor_core_span or next(iter(bf16), None)
    return Need(tuple(name for name, on in used.items() if on), at)


def schedule_need(schedule) -> Need:
    """What a tuner schedule (schedule.py) asks of the GPU before any code is generated: warpgroup
    MMA, its TMA ring (a producer warpgroup with setmaxnreg) and the ping-pong handover."""
    used = {
        "wgmma": schedule.wgmma,
        "tma": schedule.tma,
        "setmaxnreg": schedule.tma,
        "mbarrier": schedule.tma or schedule.pingpong,
    }
    return Need(tuple(name for name, on in used.items() if on))


def plan_need(dots, wgmma: bool, mainloop) -> Need:
    """What the analyse stage already knows the code will need (before the layout and emit
    stages prune points for shared memory or registers): tensor cores for `dots`, and, where
    they run as warpgroup MMA, what the mainloop policy (mainloops/) asks beyond mma.sync (a
    ping-pong policy of dots that cannot take warpgroup MMA asks nothing: its ring prunes it)."""
    features = (("mma.sync",) if dots else ()) + (mainloop.features if wgmma else ())
    return Need(features, dots[0].span if dots else None)


def runnable_schedules(probes: list, families: list[list], cc: int):
    """The tuner's schedule families (autotune.schedule_search: each probed by one schedule, then
    searched whole) that a GPU of capability `cc` can run: a family whose probe it cannot run is
    dropped whole, and no family keeps a schedule it cannot run. Returns the probes and families
    kept and (probe, why) for each probe dropped."""
    kept, refused = [], []
    for probe, family in zip(probes, families, strict=True):
        why = refusal(schedule_need(probe), cc)
        if why is not None:
            refused.append((probe, f"schedule {probe.key()} is pruned on this GPU: {why}"))
            continue
        kept.append((probe, [s for s in family if refusal(schedule_need(s), cc) is None]))
    return [p for p, _ in kept], [f for _, f in kept], refused


def cc_text(cc: int) -> str:
    return f"{cc // 10}.{cc % 10}"


def refusal(need: Need, cc: int) -> str | None:
    """Why code with `need` cannot run on a GPU of capability `cc`, or None when it can."""
    if cc < need.cc or (need.specific and cc != need.cc):
        return f"it needs {need.text()}; this GPU has compute capability {cc_text(cc)}"
    return None


def ptx_arch(need: Need, cc: int) -> str:
    """NVRTC's virtual architecture for code with `need` on a GPU of capability `cc` (which the
    caller checked with `refusal` first)."""
    if cc < HOPPER:
        return f"compute_{cc}"
    if cc == HOPPER and need.specific:
        return "compute_90a"
    return "compute_90"


def shared_memory_limit(cc: int) -> int:
    """Bytes of shared memory one CTA may have (the opt-in maximum of the CUDA programming guide's
    table): 163 KB on 8.0 and 8.7, 99 KB on 8.6, 8.9 and 12.x, 227 KB on 9.0 and 10.x, 64 KB on
    7.5. An unknown capability takes its nearest known one below."""
    known = {75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 103: 227, 120: 99}
    below = [c for c in known if c <= cc] or [min(known)]
    return known[max(below)] * 1024


def check(compiled, cc: int) -> None:
    """Raise the user's error when a compiled leaf (compiled.CompiledKernel) cannot run on a GPU of
    capability `cc`, at its first tensor-core dot, else at the kernel: its code needs a newer or
    another GPU, its PTX was compiled for a target this GPU cannot load, or its CTA needs more
    shared memory than this GPU gives one."""
    at = compiled.need.span or compiled.kernel_span
    why = refusal(compiled.need, cc)
    if why is None:
        why = _unloadable(ptx_target(compiled.ptx), cc)
    if why is None and compiled.shared_bytes > shared_memory_limit(cc):
        why = (f"it needs {compiled.shared_bytes} bytes of shared memory per CTA; this GPU (compute "
               f"capability {cc_text(cc)}) gives one at most {shared_memory_limit(cc)}")
        at = compiled.kernel_span
    if why is not None:
        raise cannot_run(at, why)


def cannot_run(at, why: str) -> CompileError:
    """The one wording of a kernel a GPU cannot run, at `at`: why, from refusal or check."""
    return CompileError(at, f"this kernel cannot run on this GPU: {why}")


def _unloadable(compiled_for: str | None, cc: int) -> str | None:
    """Why the driver would refuse PTX compiled for `compiled_for` on capability `cc`, or None."""
    found = re.fullmatch(r"compute_(\d+)(a?)", compiled_for or "")
    if found is None:
        return None
    ptx_cc, specific = int(found.group(1)), bool(found.group(2))
    if ptx_cc > cc or (specific and ptx_cc != cc):
        return (f"its PTX was compiled for {compiled_for}, which a GPU of compute capability "
                f"{cc_text(cc)} cannot load (compile it for {ptx_arch(Need(), cc)})")
    return None


_TARGET = re.compile(r"^\.target\s+sm_(\d+)(a?)", re.M)


def ptx_target(ptx: str) -> str | None:
    """The virtual architecture PTX text was compiled for (its `.target sm_XY` line), or None."""
    found = _TARGET.search(ptx)
    return f"compute_{found.group(1)}{found.group(2)}" if found else None


def parse_cc(text: str) -> int | None:
    """`8.6`, `86`, `sm_86` or `compute_86` as 86; None when it is none of these."""
    found = re.fullmatch(r"(?:sm_|compute_)?(\d+)\.(\d)|(?:sm_|compute_)?(\d{2,3})a?", text.strip())
    if not found:
        return None
    return int(found.group(1)) * 10 + int(found.group(2)) if found.group(1) else int(found.group(3))


def device_capability(index: int | None = None) -> int:
    """The compute capability of CUDA device `index` (the current one by default)."""
    import cupy

    device = cupy.cuda.Device(index) if index is not None else cupy.cuda.Device()
    return int(device.compute_capability)


def local_capability() -> int | None:
    """The current CUDA device's compute capability, or None where there is no GPU (or no cupy)."""
    try:
        return device_capability()
    except Exception:  # no cupy, no driver, no device: the caller falls back to DEFAULT_CC
        return None
