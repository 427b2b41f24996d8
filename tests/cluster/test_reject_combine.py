"""Golden tests: a cluster loop of neither combinable form is rejected at the offending span, with
the form it is closest to and why it is not that form."""

from __future__ import annotations

from tests.cluster.test_reject import FLASH_BC, MATMUL, MATMUL_DIMS, expect

DIMS = {"Nq": 128, "Nk": 128}
SOFTMAX = "this loop is closest to the online softmax, but "
LINEAR = "this loop is closest to the linear accumulator, but "


def _line(text: str, needle: str) -> int:
    return next(i for i, x in enumerate(text.splitlines(), 1) if needle in x)


def test_both_forms_are_named():
    text = FLASH_BC.replace("exp(m - m_new)", "exp(m_new - m)")
    rendered = expect(text, DIMS, _line(text, "l = l"), "correction + sum", SOFTMAX)
    assert "linear accumulator (`acc += ..`" in rendered and "online softmax (running maximum" in rendered
    assert "scaled by something other than the correction" in rendered


def test_softmax_reading_the_running_sum_elsewhere():
    text = FLASH_BC.replace("* scale\n", "* scale + expand(l, axis = 1)\n")
    expect(text, DIMS, _line(text, "* scale + expand(l"), "l, axis", SOFTMAX + "the loop reads the var 'l'")


def test_softmax_without_a_running_maximum():
    text = FLASH_BC.replace("m = m_new", "m = m_new + 1.0")
    expect(
        text,
        DIMS,
        _line(text, "m = m_new + 1.0"),
        "m = m_new",
        SOFTMAX + "'m' must grow as a running maximum",
    )


def test_softmax_accumulator_not_rescaled():
    text = FLASH_BC.replace("acc = acc * expand(correction, axis = 1) +", "acc = acc +")
    expect(text, DIMS, _line(text, "acc = acc +"), "acc + dot", SOFTMAX + "'acc' must be rescaled")


def test_softmax_maximum_not_starting_at_minus_inf():
    text = FLASH_BC.replace("var m: tile<f32>[BR] = -inf", "var m: tile<f32>[BR] = 0.0")
    expect(text, DIMS, _line(text, "var m:"), "var m", SOFTMAX + "it needs exactly three vars")


def test_softmax_store_reading_a_tensor():
    text = FLASH_BC.replace("acc / expand(l, axis = 1)", "acc / expand(l, axis = 1) + Q[row :+ BR, :]")
    expect(
        text,
        DIMS,
        _line(text, "+ Q[row"),
        "Q[row :+ BR, :]",
        SOFTMAX + "the stored value may not read a tensor",
    )


def test_softmax_reading_the_maximum_after_its_update():
    text = FLASH_BC.replace("    m = m_new\n  }", "    m = m_new\n    let late = m * 2.0\n  }")
    expect(text, DIMS, _line(text, "let late"), "m * 2.0", SOFTMAX)


def test_linear_accumulator_reading_a_var():
    text = MATMUL.replace("acc += dot(", "acc += acc * 0.0 + dot(")
    expect(text, MATMUL_DIMS, _line(text, "acc += acc"), "acc * 0.0", LINEAR + "the loop reads the var 'acc'")


def test_linear_accumulator_stored_twice():
    text = MATMUL.replace(
        "  let c_old", "  C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N] = acc\n  let c_old"
    )
    expect(text, MATMUL_DIMS, _line(text, "TILE_N] = acc"), "C[pm", LINEAR + "only lets may come between")


def _decode_text() -> str:
    from tests.cluster.helpers import small

    return small("decode_gqa_small").source


def test_chunk_mask_in_another_form_is_a_position_use():
    # `j + arange(BS) < S` is the chunk's edge mask, the same in a step leaf; `<= S` is not.
    text = _decode_text().replace("j + arange(BS) < S", "j + arange(BS) <= S")
    line = _line(text, "<= S")
    expect(text, {"G": 8, "S": 256}, line, "j + arange", "'j' is the cluster loop's variable")


def test_chunk_mask_against_another_dimension():
    text = _decode_text().replace("j + arange(BS) < S", "j + arange(BS) < G")
    expect(text, {"G": 8, "S": 256}, _line(text, "< G"), "j + arange", "'j' is the cluster loop's variable")
