"""benchmarks/decode.py's own logic on the CPU: the --variants spellings, the kernel each variant
makes (its row tile, its forced split) and the tables of a result, per case and per variant."""

from __future__ import annotations

import pytest

from benchmarks import decode


def test_variants_parse_and_refuse_other_spellings():
    got = decode.parse_variants("fan8+pad16, fan0@2sm,fan16")
    assert got == [decode.Variant("fan8+pad16", 8, None, 16), decode.Variant("fan0@2sm", 0, 2, 0),
                   decode.Variant("fan16", 16, None, 0)]
    assert got[1].split(132) == 264 and got[0].split(132) is None
    assert got[0].rows(1, "bf16") == 16 and got[0].rows(32, "bf16") == 32 and got[0].rows(1, "f32") == 1
    # the launch form: the cost model's (neither flag), or forced either way
    assert [v.one_launch for v in decode.parse_variants("fan8,fan8+one,fan8+tree")] == [None, True, False]
    for bad in ("tree8", "fan8@2", "fanx", "fan8+16", "fan8+st", "fan8+db2", "fan8+bgx", "fan8+one+tree"):
        with pytest.raises(SystemExit, match="--variants"):
            decode.parse_variants(bad)


def test_variants_carry_the_partials_schedule_and_a_row_limit():
    st, most = decode.parse_variants("fan8+pad16+st4+t128+late,fan8+db+bg16")
    assert st.schedule == "stages=4,threads=128,late_copies=1" and st.pad == 16 and st.most == 0
    assert most.schedule == "double_buffer=1" and most.most == 16
    assert most.rows(32, "bf16") == 16 and most.rows(8, "bf16") == 8 and most.rows(24, "f32") == 24


def test_a_padded_variant_makes_a_kernel_of_sixteen_row_tiles():
    kern = decode.decode_kernel(1, "bf16", 64, split=8, bg=16)
    assert "BG in [16]" in kern.source and kern.split == 8


def _row(g, name, gbs, tri_gbs):
    v = {"s": 1.0, "eager_s": 2.0, "BS": 64, "chunks": 256, "launches": 4, "err": 1e-3, "gbs": gbs,
         "of_copy": gbs / 3000, "of_spec": gbs / 3350, "eager_gbs": gbs / 2, "over_triton": gbs / tri_gbs}
    return {"G": g, "log2S": 20, "kv": "bf16", "variants": {name: v},
            "triton": {"gbs": tri_gbs, "eager_gbs": tri_gbs / 2}, "sdpa": {"error": "out of memory"}}


def test_the_tables_have_a_row_per_case_and_variant_and_a_summary_per_variant():
    rows = [_row(16, "fan8", 2700, 2400), _row(1, "fan8", 2400, 2400), _row(16, "fan0", 1500, 2400)]
    result = {"device": {"name": "H", "sms": 132, "spec_gbs": 3350}, "copy_gbs": 3000,
              "variants": ["fan8", "fan0"], "decode": rows}
    text = decode.markdown(result)
    assert "| 16 | 2^20 | bf16 | fan8 | 2700 | 0.90 |" in text
    assert "| 16 | 2^20 | bf16 | fan0 | 1500 | 0.50 |" in text
    assert "| fan8 | 2 | 0.85 | 0.80 | 1.06 |" in text and "| fan0 | 1 | 0.50 | 0.50 | 0.62 |" in text
