"""The CUDA-core mainloop: policy.py (the policy value) and dots.py (dot as FMA over shared-memory
tiles, single or double buffered)."""
