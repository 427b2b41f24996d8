"""The cluster compiler: an @cluster kernel at concrete dims -> a ClusterProgram (program.py).

    compile_cluster(kernel, dims, *, cluster_values=None, tile_values=None) -> ClusterProgram
    cluster_space(kernel) -> list[dict[str, int]]      every combination of @cluster values

docs/cluster.md is the user's guide; build.py lists the stages.
"""

from compiler.cluster.build import cluster_space, compile_cluster

__all__ = ["cluster_space", "compile_cluster"]
