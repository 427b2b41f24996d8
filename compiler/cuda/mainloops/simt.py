"""The CUDA-core mainloop: dots as FMA over shared-memory tiles (dots.py), f32 operands of a loop
fetched one iteration ahead into registers (loops.prefetch_first); no tensor-core ring."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda.mainloops.base import Mainloop


@dataclass(frozen=True)
class Simt(Mainloop):
    name = "simt"
