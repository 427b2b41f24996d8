"""Golden tests: every kernel the cluster compiler rejects, with the exact line:col of the error,
a substring of its message, and no internal file name in the rendered text."""

from __future__ import annotations

import pytest

from compiler.cluster.build import check_cluster, compile_cluster
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.load import load_text

FILE = "bad.phk"


def _error(text: str, dims: dict[str, int], **kw) -> CompileError:
    with pytest.raises(CompileError) as info:
        kernel = load_text(text, FILE).kernels[0]
        compile_cluster(kernel, dims, **kw)
    return info.value


def _check_error(text: str) -> CompileError:
    """What `check` reports: the checker's error, or the cluster compiler's dimension-free one."""
    try:
        kernel = load_text(text, FILE).kernels[0]
    except CompileError as err:
        return err
    with pytest.raises(CompileError) as info:
        check_cluster(kernel)
    return info.value


def expect(text: str, dims: dict[str, int], line: int, needle: str, message: str, **kw) -> str:
    """The error is at `line`, at the column where `needle` starts on that line; `check` reports
    the same error, with no dimension given (unless the case pins other values)."""
    err = _error(text, dims, **kw)
    if not kw:
        assert _check_error(text).render() == err.render()
    col = text.splitlines()[line - 1].index(needle) + 1
    rendered = err.render()
    assert rendered.startswith(f"{FILE}:{line}:{col}: error: "), rendered
    assert message in err.message, rendered
    assert ".py" not in rendered and "compiler/" not in rendered and "Traceback" not in rendered
    return rendered


ADD = """@cluster(BLOCK in [64, 256])
@autotune(BLOCK in [16, 64])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""


def test_cluster_name_not_in_autotune():
    text = ADD.replace("@cluster(BLOCK in [64, 256])", "@cluster(BLOCK in [64, 256], X in [4, 8])")
    expect(text, {"N": 256}, 1, "X in", "@cluster name 'X' is not an @autotune name")


def test_cluster_name_that_is_a_dimension_is_not_a_search_dimension():
    text = """@cluster(D in [64])
@autotune(D in [64], BR in [32, 128])
kernel f(Q: tensor<f32>[Nq, D], O: tensor<f32>[Nq, D]) {
  let row = ctx.block.x * BR
  O[row :+ BR, :] = Q[row :+ BR, :]
}
"""
    expect(text, {"Nq": 64}, 1, "D in", "'D' is a tensor dimension, not a search dimension")


def test_cluster_name_that_sizes_no_super_tile():
    text = """@cluster(BLOCK in [64, 256], T in [8, 16])
@autotune(BLOCK in [16, 64], T in [8, 16])
kernel add(a: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] * f32(T)
}
"""
    expect(text, {"N": 256}, 1, "T in", "sizes no super-tile")


def test_tile_parameter():
    text = ADD.replace("b: tensor<f32>[N]", "b: tile<f32>[BLOCK]")
    expect(text, {"N": 256}, 3, "tile<",
           "expected 'tensor<...>[...]' or a scalar type (f32, i32, i64, u32, bool), found 'tile'")


def test_read_outside_the_own_super_tile_needs_a_halo():
    text = ADD.replace("b[base :+ BLOCK]", "b[base + 1 :+ BLOCK]")
    expect(text, {"N": 256}, 5, "base + 1", "'b' is read outside its own super-tile")


def test_tensor_read_at_two_super_tile_coordinates():
    text = """@cluster(T in [32, 64])
@autotune(T in [16, 32])
kernel sym(a: tensor<f32>[N, N], b: tensor<f32>[N, N]) {
  let i = ctx.block.x * T
  let j = ctx.block.y * T
  b[i :+ T, j :+ T] = a[i :+ T, j :+ T] + transpose(a[j :+ T, i :+ T])
}
"""
    expect(text, {"N": 128}, 6, "j :+ T, i", "'a' is read at two different super-tile coordinates")


def test_tensor_read_split_and_whole():
    text = ADD.replace("b[base :+ BLOCK]", "sum(a[:], axis = 0)")
    expect(text, {"N": 256}, 5, ":]", "'a' is read at two different super-tile coordinates")


def test_dimension_cut_two_ways():
    text = """@cluster(BR in [64, 128])
@autotune(BR in [16, 64], BC in [16, 64])
kernel f(x: tensor<f32>[R], y: tensor<f32>[R], out: tensor<f32>[R]) {
  let row = ctx.block.x * BR
  var total: tile<f32>[BC] = 0.0
  for j in range(0, R, BC) {
    total += y[j :+ BC]
  }
  out[row :+ BR] = x[row :+ BR] + sum(total, axis = 0)
}
"""
    expect(
        text,
        {"R": 256},
        9,
        "row :+ BR] +",
        "dimension 'R' is split into super-tiles by ctx.block.x * BR here but taken whole at line 7",
    )


def test_leaf_loop_that_does_not_start_at_zero():
    text = """@cluster(BR in [64, 128])
@autotune(BR in [16, 64], BC in [16, 64])
kernel rowsum(x: tensor<f32>[R, C], y: tensor<f32>[R]) {
  let row = ctx.block.x * BR
  var total: tile<f32>[BR] = 0.0
  for j in range(BC, C, BC) {
    total += sum(x[row :+ BR, j :+ BC], axis = 1)
  }
  y[row :+ BR] = total
}
"""
    expect(text, {"R": 128, "C": 64}, 6, "BC, C", "a loop inside a leaf must start at 0")


def test_leaf_loop_whose_bound_is_not_a_dimension():
    text = """@cluster(BR in [64, 128])
@autotune(BR in [16, 64], BC in [16, 64])
kernel rowsum(x: tensor<f32>[R, C], y: tensor<f32>[R]) {
  let row = ctx.block.x * BR
  var total: tile<f32>[BR] = 0.0
  for j in range(0, 4 * BC, BC) {
    total += sum(x[row :+ BR, j :+ BC], axis = 1)
  }
  y[row :+ BR] = total
}
"""
    expect(text, {"R": 128, "C": 64}, 6, "4 * BC", "must run to a tensor dimension")


FLASH_BC = """@cluster(BR in [64, 128], BC in [64, 128])
@autotune(D in [64], BR in [32, 128], BC in [32, 128])
kernel flash(Q: tensor<f32>[Nq, D], K: tensor<f32>[Nk, D], V: tensor<f32>[Nk, D], O: tensor<f32>[Nq, D],
             scale: f32) {
  let row = ctx.block.x * BR
  let q = Q[row :+ BR, :]
  var m: tile<f32>[BR] = -inf
  var l: tile<f32>[BR] = 0.0
  var acc: tile<f32>[BR, D] = 0.0
  for j in range(0, Nk, BC) {
    let s = dot(q, transpose(K[j :+ BC, :])) * scale
    let m_new = max(m, max(s, axis = 1))
    let p = exp(s - expand(m_new, axis = 1))
    let correction = exp(m - m_new)
    l = l * correction + sum(p, axis = 1)
    acc = acc * expand(correction, axis = 1) + dot(p, V[j :+ BC, :])
    m = m_new
  }
  O[row :+ BR, :] = acc / expand(l, axis = 1)
}
"""


def test_online_softmax_updating_the_maximum_before_rescaling():
    # Before the online softmax was a combine form, every such loop was refused; now a loop that
    # updates m before rescaling l and acc is refused as an attempted online softmax.
    text = FLASH_BC.replace("    m = m_new\n", "").replace(
        "    l = l * correction", "    m = m_new\n    l = l * correction"
    )
    expect(
        text,
        {"Nq": 128, "Nk": 128},
        next(i for i, x in enumerate(text.splitlines(), 1) if "l = l" in x),
        "l = l",
        "this loop is closest to the online softmax, but 'l' is rescaled after 'm' is updated",
    )


MATMUL = """@cluster(TILE_M in [32, 64], TILE_N in [32, 64], TILE_K in [16, 64])
@autotune(TILE_M in [16, 256], TILE_N in [16, 256], TILE_K in [4, 32])
kernel matmul(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N], alpha: f32, beta: f32) {
  let pm = ctx.block.x
  let pn = ctx.block.y
  var acc: tile<f32>[TILE_M, TILE_N] = 0.0
  for kt in range(0, K, TILE_K) {
    acc += dot(A[pm * TILE_M :+ TILE_M, kt :+ TILE_K], B[kt :+ TILE_K, pn * TILE_N :+ TILE_N])
  }
  let c_old = C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N]
  C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N] = alpha * acc + beta * c_old
}
"""
MATMUL_DIMS = {"M": 64, "N": 64, "K": 64}


def test_accumulator_stored_in_another_form():
    text = MATMUL.replace("alpha * acc + beta * c_old", "alpha * acc * c_old")
    expect(text, MATMUL_DIMS, 11, "alpha * acc * c_old", "the stored value has another form")


def test_accumulator_not_starting_at_zero():
    text = MATMUL.replace("TILE_N] = 0.0", "TILE_N] = 1.0")
    expect(text, MATMUL_DIMS, 6, "1.0", "must start at 0")


def test_accumulator_old_value_from_another_region():
    text = MATMUL.replace(
        "let c_old = C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N]",
        "let c_old = load(C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N], fill = 1.0)",
    )
    expect(text, MATMUL_DIMS, 11, "c_old", "must be the output's old value")


def test_super_tile_not_a_multiple_of_the_leaf_tile():
    text = ADD.replace("@cluster(BLOCK in [64, 256])", "@cluster(BLOCK in [48, 96, 192])").replace(
        "[16, 64]", "[32, 64]"
    )
    expect(
        text,
        {"N": 192},
        1,
        "BLOCK in",
        "super-tile BLOCK = 48 is not a whole multiple of the leaf's tile BLOCK = 32",
    )


def test_absolute_position_used_as_a_value():
    text = """@cluster(BR in [64, 128])
@autotune(D in [64], BR in [32, 128], BC in [32, 128])
kernel causal(Q: tensor<f32>[N, D], K: tensor<f32>[M, D], O: tensor<f32>[N, D]) {
  let row = ctx.block.x * BR
  let rows = expand(row + arange(BR), axis = 1)
  O[row :+ BR, :] = where(rows > 3, Q[row :+ BR, :], 0.0)
}
"""
    expect(text, {"N": 128, "M": 64}, 5, "row + arange", "'row' is a super-tile position here")


def test_split_dimension_used_as_a_value():
    text = ADD.replace("+ b[base :+ BLOCK]", "/ f32(N)")
    expect(text, {"N": 256}, 5, "N)", "dimension 'N' is split into super-tiles")


def test_output_not_split_along_a_cluster_axis():
    text = """@cluster(BR in [64, 128])
@autotune(BR in [16, 64])
kernel colsum(x: tensor<f32>[R, C], total: tensor<f32>[C]) {
  let row = ctx.block.x * BR
  total[:] = sum(x[row :+ BR, :], axis = 0)
}
"""
    expect(
        text, {"R": 128, "C": 32}, 5, ":]", "every unit of work along that axis would write this same region"
    )


def test_a_leaf_that_does_not_check_is_an_internal_error_not_a_user_error():
    from compiler.cluster.leaves import LeafBug, check_leaf

    with pytest.raises(LeafBug, match="cluster compiler bug") as info:
        check_leaf("kernel broken(a: tensor<f32>[N]) {\n  a[0 :+ 1] = b\n}\n", "<leaf>")
    assert not isinstance(info.value, CompileError)


def test_split_dimension_through_a_let_used_as_a_value():
    text = ADD.replace("  let base", "  let n = N - 1\n  let base").replace("+ b[base :+ BLOCK]", "/ f32(n)")
    expect(text, {"N": 256}, 6, "n)", "'n' is computed from dimension 'N'")


def test_one_dimension_cut_two_ways():
    text = ADD.replace("b: tensor<f32>[N]", "b: tensor<f32>[N, N]").replace(
        "a[base :+ BLOCK] + b[base :+ BLOCK]", "a[base :+ BLOCK] + sum(b[base :+ BLOCK, :], axis = 1)"
    )
    expect(text, {"N": 256}, 5, ":]", "dimension 'N' is taken whole here but split into super-tiles by "
           "ctx.block.x * BLOCK at line 5; the leaf sees one value per dimension")
