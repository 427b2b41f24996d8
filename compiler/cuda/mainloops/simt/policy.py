"""The CUDA-core mainloop: dots as FMA over shared-memory tiles (mainloops/simt/dots.py), f32 operands of a
loop fetched one iteration ahead into registers (loops.prefetch_first); no tensor-core ring. `double_buffer`
(Schedule.double_buffer): two shared buffers per prefetched operand, taken in turn, so an iteration needs one
barrier instead of two (loops.pipelined_lets)."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda.mainloops.base import Mainloop


@dataclass(frozen=True)
class Simt(Mainloop):
    double_buffer: bool = False

    name = "simt"

    def shared_copies(self) -> int:
        return 2 if self.double_buffer else 1
