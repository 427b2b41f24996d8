"""The reduction trees' shapes by name (compiler/cluster/tree.py builds and describes them).

Apart from the trees themselves: the command lists these names in its parser, which it builds
before it starts its local pods, and tree.py's dataclasses (with `inspect`, 7-10 ms of imports)
would load before the pods start too."""

SHAPES = ("flat", "binary", "hosts")
