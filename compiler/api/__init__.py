"""Calling a kernel from Python on numpy, torch or cupy arrays: the kernel half of the public API
(package `phobos`, docs/python.md). kernel.py: phobos.Kernel, load, from_source; arrays.py: what
a call reads of an array, without copying it."""
