"""Where leaves run and buffers live: the CPU backend (numpy, the interpreter) and the GPU backend
(cupy, PTX)."""
