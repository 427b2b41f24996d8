"""The cluster compiler: an @cluster kernel at concrete dims -> a ClusterProgram (program.py).

    compile_cluster(kernel, dims, *, cluster_values=None, tile_values=None) -> ClusterProgram
    cluster_space(kernel) -> list[dict[str, int]]      every combination of @cluster values
    check_cluster(kernel) -> ClusterShape              the rejections that need no dimension
    values_outside_space(kernel, values) -> list[str]  warnings for pinned values outside the space

docs/cluster.md is the user's guide; build.py lists the stages.
"""

from compiler.cluster.build import check_cluster, cluster_space, compile_cluster, values_outside_space

__all__ = ["check_cluster", "cluster_space", "compile_cluster", "values_outside_space"]
