"""Leaves are IR made from the user's checked kernel (compiler/cluster/leaves.py, partial_leaves.py):
their text on the wire is the IR printer's, and it parses back to the very IR it was printed from,
for every leaf of every @cluster kernel here (split leaves and `ctx.origin` variants included)."""

from __future__ import annotations

import pytest

from common.paths import repo_file
from compiler.cluster.build import analyze_cluster, compile_cluster
from compiler.cluster.leaves import check_leaf, leaf_kernel, leaf_source
from compiler.cluster.tree import SplitRequest
from compiler.frontend.load import load_file
from compiler.frontend.walk import without_spans
from tests.cluster.helpers import small

FILES = sorted({*repo_file("examples").rglob("*.phk"), *repo_file("tests/cluster/kernels").glob("*.phk")})
CLUSTER_KERNELS = [(path, k) for path in FILES for k in load_file(path).kernels if k.cluster is not None]


@pytest.mark.parametrize("path,kernel", CLUSTER_KERNELS, ids=lambda x: getattr(x, "name", None) or x.stem)
def test_every_leaf_prints_to_a_text_that_parses_to_the_same_ir(path, kernel):
    leaves = analyze_cluster(kernel).leaf_kernels  # those of a split into shares included
    assert leaves
    for base, leaf in leaves.items():
        again = check_leaf(leaf_source(leaf), f"<cluster leaf {base}>")
        assert without_spans(again) == without_spans(leaf), base
        assert leaf.span.file == kernel.span.file  # in this process a leaf points at the user's file


def test_origin_variants_and_split_leaves_of_a_program_round_trip():
    for kernel, dims, split in ((small("causal_small"), {"Nq": 96, "Nk": 96}, None),
                                (small("decode_gqa_small"), {"S": 1500, "G": 4}, SplitRequest(3)),
                                (small("matmul_small"), {"M": 96, "N": 64, "K": 512}, SplitRequest(2))):
        program = compile_cluster(kernel, dims, split=split)
        for leaf in program.leaves:
            parsed = check_leaf(leaf.source, f"<cluster leaf {leaf.name}>")  # as a pod does
            assert without_spans(parsed) == without_spans(leaf_kernel(leaf)), leaf.name
