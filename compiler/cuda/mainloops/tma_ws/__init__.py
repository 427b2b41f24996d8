"""The warp-specialized TMA mainloop and its machinery: policy.py (the policy value), ring.py (the
producer warpgroup's bulk-copy ring), tf32.py (TF32 by role swap), store.py (the epilogue through
shared memory and a TMA store), maps.py (the host side: one tensor map per operand)."""
