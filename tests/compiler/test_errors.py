"""Golden error tests: each bad kernel fails with an exact `file:line:col`, a message that says
what is wrong, and no trace of phobos' own files in the rendered text."""

from __future__ import annotations

import pytest
from user_errors import assert_reported

ATTRS = "@autotune(B in [32, 64])"
PARAMS = "a: tensor<f32>[N], b: tensor<f32>[N]"


def k(body: str, attrs: str = ATTRS, params: str = PARAMS) -> str:
    """A kernel whose body starts on line 3 (line 1: attributes, line 2: the header)."""
    return f"{attrs}\nkernel k({params}) {{\n{body}\n}}\n"


NARROW = "a: tensor<f32>[N], h: tensor<bf16>[N, N], g: tensor<f16>[N, N], a2: tensor<f32>[N, N]"
HEADS = "q: tensor<f32>[H, N], r: tensor<f32>[G, N]"
GRID = "  let i = ctx.block.x * B\n"  # a body line 3 that uses grid axis x

CASES = [
    # ---- lexing ----
    ("bad_char", k("  let x = a[0 :+ B] $ 2"), "3:21", "unexpected character '$'"),
    ("unclosed_paren", k("  let x = exp(a[0 :+ B]"), "3:14", "unclosed '('"),
    ("bad_exponent", k("  let x = 1e + 2"), "3:11", "exponent has no digits"),
    ("number_then_letters", k("  let x = 12abc"), "3:11", "malformed number '12abc'"),
    ("stray_close", k("  let x = 1)"), "3:12", "unexpected ')'"),
    ("string", k('  let x = "hi"'), "3:11", "strings are not part of the language"),
    # ---- parsing ----
    ("missing_brace", "kernel k(a: tensor<f32>[N]) {\n  a[0 :+ 4] = 1.0\n", "1:29", "never closed"),
    ("colon_slice", k("  let x = a[0 : 4]"), "3:15", "slices are written 'start :+ extent'"),
    ("slice_no_extent", k("  let x = a[0 :+ ]"), "3:18", "the slice's extent"),
    ("let_without_eq", k("  let x 1"), "3:9", "expected '=' after 'let x'"),
    ("two_exprs", k("  let x = 1 2"), "3:13", "expected the end of the statement"),
    ("range_arity", k("  for i in range(0, N, B, 1) {\n  }"), "3:12", "range takes"),
    ("chained_compare", k("  let x = 1 < 2 < 3"), "3:17", "comparisons do not chain"),
    ("bad_param_type", "kernel k(a: tensor<f64>[N]) {\n}\n", "1:20",
     "expected a type (f32, f16, bf16, i32, i64, u32, u8, bool, e4m3, e5m2)"),
    ("not_a_statement", k("  1 + 2"), "3:3", "expected a statement"),
    ("load_two_args", k("  let x = load(a[0 :+ B], b[0 :+ B])"), "3:11", "load takes one tensor slice"),
    # ---- attributes ----
    ("unknown_attribute", k("", attrs="@tune(B in [32])"), "1:2", "unknown attribute '@tune'"),
    ("empty_list", k("", attrs="@autotune(B in [])"), "1:11", "empty list of values"),
    ("non_integer", k("", attrs="@autotune(B in [1.5])"), "1:17", "must be an integer"),
    ("reversed_bounds", k("", attrs="@autotune(B in [64, 32])"), "1:11", "low 64 > high 32"),
    ("non_positive_value", k("", attrs="@autotune(B in [0, 32])"), "1:17", "must be positive"),
    ("duplicate_name", k("", attrs="@autotune(B in [32], B in [64])"), "1:22", "'B' appears twice"),
    (
        "duplicate_attribute",
        k("", attrs="@autotune(B in [32])\n@autotune(C in [32])"),
        "2:1",
        "duplicate attribute @autotune",
    ),
    (
        "cluster_not_autotune",
        k("", attrs="@cluster(C in [1024, 4096])\n@autotune(B in [32])"),
        "1:10",
        "'C' is not an @autotune name",
    ),
    (
        "aligned_not_dim",
        k("", attrs="@autotune(B in [32])\n@aligned(Q = B)"),
        "2:10",
        "'Q' is not a tensor dimension",
    ),
    (
        "aligned_not_tile",
        k("", attrs="@autotune(B in [32])\n@aligned(N = N)"),
        "2:10",
        "'N' is not an @autotune tile name",
    ),
    ("launch_not_multiple", k("", attrs="@launch(threads = 100)"), "1:1", "positive multiple of 32"),
    ("launch_too_many", k("", attrs="@launch(2048)"), "1:1", "up to 1024"),
    ("launch_unknown_arg", k("", attrs="@launch(warps = 4)"), "1:9", "unknown @launch argument 'warps'"),
    (
        "dim_with_range",
        k("", attrs="@autotune(N in [32, 64])"),
        "1:11",
        "'N' is a tensor dimension, so @autotune may only fix it",
    ),
    ("autotune_is_param", k("", attrs="@autotune(a in [32])"), "1:11", "'a' is already a parameter"),
    # ---- names ----
    ("unknown_name", k("  let x = y + 1"), "3:11", "unknown name 'y'"),
    ("unknown_function", k("  let x = softplus(1.0)"), "3:11", "unknown function 'softplus'"),
    ("unknown_tensor", k("  let x = c[0 :+ B]"), "3:11", "unknown tensor 'c'"),
    ("tensor_as_value", k("  let x = a + 1"), "3:11", "tensor 'a' cannot be used as a value"),
    ("index_a_let", k("  let t = 1\n  let x = t[0]"), "4:11", "'t' is not a tensor parameter"),
    (
        "duplicate_param",
        "kernel k(a: tensor<f32>[N], a: f32) {\n}\n",
        "1:29",
        "parameter 'a' is declared twice",
    ),
    ("dim_is_param", "kernel k(a: tensor<f32>[N], N: i32) {\n}\n", "1:25", "dimension 'N' has the same name"),
    (
        "shadowing",
        k("  let x = 1\n  for j in range(0, N, B) {\n    let x = 2\n  }"),
        "5:9",
        "'x' is already a let in scope",
    ),
    ("let_shadows_tile", k("  let B = 1"), "3:7", "'B' is already a tile name"),
    (
        "bad_keyword_arg",
        k("  let x = exp(a[0 :+ B], axis = 0)"),
        "3:33",
        "exp has no keyword argument 'axis'",
    ),
    # ---- types and shapes ----
    (
        "add_shape_mismatch",
        k(
            "  let x = a2[0 :+ BR, 0 :+ BC] + a2[0 :+ BR, :]",
            attrs="@autotune(BR in [32], BC in [16, 64])",
            params="a2: tensor<f32>[R, D]",
        ),
        "3:34",
        "shape mismatch: tile<f32>[BR, BC] and tile<f32>[BR, D] differ in axis 1",
    ),
    (
        "dot_inner",
        k("  let x = dot(m[0 :+ B, 0 :+ B], m[0 :+ 16, 0 :+ B])", params="m: tensor<f32>[R, C]"),
        "3:34",
        "dot inner extents differ",
    ),
    ("dot_rank", k("  let x = dot(a[0 :+ B], a[0 :+ B])"), "3:15", "dot needs a rank-2 tile"),
    (
        "store_shape",
        k("  m[0 :+ B, 0 :+ B] = m[0 :+ B, 0 :+ 16]", params="m: tensor<f32>[R, C]"),
        "3:23",
        "the slice of 'm' is tile<f32>[B, B]; cannot store tile<f32>[B, 16]",
    ),
    (
        "var_shape",
        k("  var acc: tile<f32>[B] = 0.0\n  acc = a[0 :+ 16]"),
        "4:9",
        "var 'acc' is tile<f32>[B]; cannot assign tile<f32>[16]",
    ),
    ("var_init_shape", k("  var acc: tile<f32>[B, B] = a[0 :+ B]"), "3:30", "cannot assign tile<f32>[B]"),
    ("assign_let", k("  let x = 1\n  x = 2"), "4:3", "cannot assign to 'x': it is a let"),
    ("assign_loop_var", k("  for j in range(0, N, B) {\n    j = 2\n  }"), "4:5", "it is a loop variable"),
    ("assign_dim", k("  N = 3"), "3:3", "cannot assign to 'N': it is a dimension"),
    ("f32_into_i32_var", k("  var n: i32 = 0\n  n = 1.5"), "4:7", "without a conversion i32(...)"),
    (
        "rank_mismatch",
        k("  let x = a[0 :+ B, 0 :+ B]"),
        "3:11",
        "tensor 'a' has 1 dimension, but the index has 2",
    ),
    (
        "extent_not_compile_time",
        k("  let x = a[0 :+ n]", params="a: tensor<f32>[N], n: i32"),
        "3:18",
        "a slice extent must be known at compile time",
    ),
    ("f32_slice_start", k("  let x = a[1.5 :+ B]"), "3:13", "a slice start must be an i32 scalar, found f32"),
    ("sum_axis_range", k("  let x = sum(a[0 :+ B], axis = 1)"), "3:33", "axis 1 is out of range 0..0"),
    ("sum_needs_axis", k("  let x = sum(a[0 :+ B])"), "3:11", "sum needs 'axis = k'"),
    ("where_cond", k("  let x = where(a[0 :+ B], 1.0, 0.0)"), "3:17", "where's condition must be bool"),
    ("and_on_numbers", k("  let x = a[0 :+ B] and true"), "3:11", "'and' needs bool operands"),
    ("bool_store", k("  a[0 :+ B] = a[0 :+ B] < 1.0"), "3:15", "cannot store tile<bool>[B]"),
    (
        "loop_start_f32",
        k("  for j in range(0.5, N, B) {\n  }"),
        "3:18",
        "the loop start must be an i32 scalar",
    ),
    # ---- grid and loops ----
    (
        "block_without_grid",
        k("  let i = ctx.block.x + 1\n  a[i :+ B] = 1.0"),
        "3:11",
        "ctx.block.x is used, but no slice",
    ),
    (
        "grid_y_without_x",
        k("  let j = ctx.block.y * B\n  a[j :+ B] = 1.0"),
        "3:11",
        "grid axis y is used without axis x",
    ),
    (
        "inconsistent_grid",
        k(GRID + "  a[i :+ B] = c[i :+ B]", params="a: tensor<f32>[N], c: tensor<f32>[M]"),
        "4:17",
        "inconsistent grid axis x: here it covers dimension 'M'",
    ),
    (
        "grid_tile_mismatch",
        k(
            GRID + "  let j = ctx.block.x * C\n  a[i :+ B] = a[j :+ C]",
            attrs="@autotune(B in [32], C in [64])",
        ),
        "5:17",
        "in tiles of 'C'",
    ),
    ("zero_step", k("  for j in range(0, N, 0) {\n  }"), "3:24", "the loop step must be positive, found 0"),
    ("negative_step", k("  for j in range(0, N, -B) {\n  }"), "3:24", "loops only count up"),
    (
        "runtime_step",
        k("  for j in range(0, N, n) {\n  }", params="a: tensor<f32>[N], n: i32"),
        "3:24",
        "the loop step must be known at compile time",
    ),
    # ---- precision, narrow floats, grid indices ----
    (
        "dot_mixed_types",
        k("  let x = dot(h[0 :+ B, 0 :+ B], a2[0 :+ B, 0 :+ B])", params=NARROW),
        "3:34",
        "dot operands differ in type: tile<bf16>[B, B] times tile<f32>[B, B]",
    ),
    (
        "dot_bf16_f16",
        k("  let x = dot(h[0 :+ B, 0 :+ B], g[0 :+ B, 0 :+ B])", params=NARROW),
        "3:34",
        "dot operands differ in type: tile<bf16>[B, B] times tile<f16>[B, B]",
    ),
    (
        "tf32_on_bf16",
        k("  let x = dot(h[0 :+ B, 0 :+ B], h[0 :+ B, 0 :+ B], precision = tf32)", params=NARROW),
        "3:65",
        "precision = tf32 applies only to a dot of f32 operands; these are bf16",
    ),
    (
        "f32_precision_on_f16",
        k("  let x = dot(g[0 :+ B, 0 :+ B], g[0 :+ B, 0 :+ B], precision = f32)", params=NARROW),
        "3:65",
        "precision = f32 applies only to a dot of f32 operands; these are f16",
    ),
    (
        "unknown_precision",
        k("  let x = dot(a2[0 :+ B, 0 :+ B], a2[0 :+ B, 0 :+ B], precision = fp8)", params=NARROW),
        "3:67",
        "unknown precision 'fp8' (known: f32, tf32)",
    ),
    (
        "precision_as_number",
        k("  let x = dot(a2[0 :+ B, 0 :+ B], a2[0 :+ B, 0 :+ B], precision = 32)", params=NARROW),
        "3:67",
        "precision must be written as a name: f32 or tf32",
    ),
    (
        "precision_on_exp",
        k("  let x = exp(a[0 :+ B], precision = tf32)"),
        "3:38",
        "exp has no keyword argument 'precision'",
    ),
    ("kernel_precision_bf16", k("", attrs="@precision(bf16)"), "1:12", "@precision takes f32 or tf32"),
    (
        "kernel_tf32_without_f32_dots",
        k("  b[0 :+ 4] = a[0 :+ 4]", attrs="@precision(tf32)"),
        "1:1",
        "@precision(tf32) changes dots of f32 operands, and this kernel has none",
    ),
    (
        "kernel_tf32_on_bf16_dots_only",
        k("  let x = dot(h[0 :+ B, 0 :+ B], h[0 :+ B, 0 :+ B])", attrs="@precision(tf32) " + ATTRS,
          params=NARROW),
        "1:1",
        "@precision(tf32) changes dots of f32 operands, and this kernel has none",
    ),
    (
        "duplicate_precision",
        k("", attrs="@precision(tf32) @precision(f32)"),
        "1:18",
        "duplicate attribute @precision",
    ),
    (
        "cast_of_bool",
        k("  let x = bf16(a[0 :+ B] < 1.0)"),
        "3:16",
        "bf16() converts numbers, found tile<bool>[B]",
    ),
    ("cast_arity", k("  let x = f16(a[0 :+ B], 2)"), "3:11", "f16 takes 1 argument, found 2"),
    (
        "narrow_into_i32_var",
        k("  var n: i32 = 0\n  n = h[0, 0]", params=NARROW),
        "4:7",
        "var 'n' is i32; cannot assign bf16 without a conversion i32(...)",
    ),
    (
        "grid_index_two_dims",
        k("  let x = q[ctx.block.x, 0 :+ B]\n  r[ctx.block.x, 0 :+ B] = x", params=HEADS),
        "4:5",
        "inconsistent grid axis x: this index gives it one CTA per element of 'G', but line 3",
    ),
    (
        "grid_index_in_cluster_kernel",
        k("  r[ctx.block.x, 0 :+ B] = q[0, 0 :+ B]", attrs="@cluster(B in [64]) " + ATTRS, params=HEADS),
        "3:5",
        "grid axis x is tied by an index (one CTA per element of 'G'); @cluster kernels need grid slices",
    ),
    (
        "duplicate_kernel",
        "kernel k(a: tensor<f32>[N]) {\n}\nkernel k(a: tensor<f32>[N]) {\n}\n",
        "3:8",
        "kernel 'k' is defined twice",
    ),
]


@pytest.mark.parametrize(("source", "where", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error(source, where, message):
    assert_reported(source, where, message)


def test_case_count():
    assert len(CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)
