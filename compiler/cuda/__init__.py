"""The CUDA leaf compiler: checked kernel + binding -> CUDA C++ -> NVRTC -> PTX.

Public API (compiled.py):
- `compiler.cuda.compiled.compile_kernel(kernel, binding, *, tf32=False, cc=90) -> CompiledKernel`:
  dims and tile values of the binding become compile-time constants, PTX for a GPU of compute
  capability `cc` (target.py); raises CompileError for kernels or points it cannot compile
  (pruned points say so) or that GPU cannot run, never returns a silently wrong kernel.
- `compiler.cuda.launch.launch(compiled, arrays, scalars, stream=None)`: device arrays in, no host
  round trip; `launch.run_kernel_gpu(kernel, binding, arrays, scalars)`: host arrays in, outputs out;
  every launch path passes its scalar arguments through scalars.py.
- `compiler.cuda.nvrtc.compile_to_ptx(source, arch="compute_90")`, cached per (source, options).
- `compiler.cuda.tuning.autotune.tune(kernel, dims)` / `cached_choice(kernel, dims)`.
- `compiler.cuda.target`: what a leaf's code needs of the GPU, the PTX target for a compute
  capability, the check before a module load.
Stages (stages.py, in order): bind, fp8, hoist, split, fit, epilogue, analyse (the KernelPlan and
its mainloop policy, mainloops/registry.py), lay out, emit, nvrtc. The emit stage is
codegen.KernelGen (statements) over exprs.ExprEmitter (expressions), with calls.py (the built-in
calls), stores/ (a Store statement's writes), mma.py (mma.sync dots), operands.py (their
shared-memory buffers), staged.py (which buffer an operand already lives in), tf32.py (the one
rounding of f32 to TF32, to nearest even), loops.py (software pipelining of loop operands) and
reductions.py as functions of that one emitter, asking the leaf's mainloop policy
(mainloops/<policy>/: FMA dots, warpgroup MMA, the TMA ring, ...) how each loop's operands are
staged; values.py holds what they pass around. The layout: docs/architecture.md.
"""
