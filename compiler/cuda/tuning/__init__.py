"""The single-GPU tuner: autotune.py (the first call's stages), model.py (which candidates are worth
compiling), pool.py (parallel compile processes), timing.py (inputs made on the device, the launch
timer), cache.py (the tuning cache)."""
