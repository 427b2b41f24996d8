"""The warpgroup-MMA mainloop and its emitters: policy.py (the policy value), mma.py (wgmma of
bf16/f16 operands), tf32.py (TF32 operands K-major in shared memory), fp8_promote.py (fp8 MMA
promoted into an f32 accumulator once per k tile)."""
