"""The cluster compiler: an @cluster kernel at concrete dims -> a ClusterProgram (program.py).

    compiler.cluster.build.compile_cluster(kernel, dims, *, cluster_values=None, tile_values=None)
    compiler.cluster.build.cluster_space(kernel) -> list[dict[str, int]]   every @cluster combination
    compiler.cluster.build.check_cluster(kernel)        the rejections that need no dimension (`check`)
    compiler.cluster.build.values_outside_space(kernel, values) -> warnings for pinned values

docs/cluster.md is the user's guide; build.py lists the stages. This file imports nothing, so that
importing one module of the package does not import the whole compiler (and no cycle runs through
the package).
"""
