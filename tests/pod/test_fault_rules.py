"""The grammar of PHOBOS_FAULT (pod/faults.py), the test-only fault injection, and what `hit`
asks of an instruction's runner. The signals themselves are exercised by tests/faults."""

from __future__ import annotations

import pytest

from common.errors import UserError
from pod.faults import Delay, Faults, Rule, parse


def test_every_rule_form_reads():
    assert parse("kill-at=fetch:3, stop-at=serve:1,kill-unit=5,kill-unit=2:0,slow-at=load:1:2.5") == (
        Rule("kill", "fetch", nth=3), Rule("stop", "serve", nth=1),
        Rule("kill", "compute", unit=5, delay=0.5), Rule("kill", "compute", unit=2, delay=0.0),
        Rule("slow", "load", nth=1, delay=2.5))
    assert parse("hold-at=store:2:/tmp/go:now, kill-at-generation=3:allocate") == (
        Rule("slow", "store", nth=2, until="/tmp/go:now"), Rule("kill", "allocate", generation=3))
    assert parse("") == ()


@pytest.mark.parametrize("text", ["kill-at=read:1", "kill-at=load:0", "slow-at=load:1", "slow-at=load:1:-1",
                                  "slow-at=load:x:1", "explode=1", "kill-unit=x",
                                  "hold-at=load:1", "hold-at=load:1:", "kill-at-generation=0:load",
                                  "kill-at-generation=2:read"])
def test_a_bad_rule_is_a_user_error_naming_it(text):
    with pytest.raises(UserError, match="cannot read"):
        parse(text)


def test_slow_delays_only_its_nth_instruction_of_that_kind():
    faults = Faults(parse("slow-at=load:2:1.5"))
    assert [faults.hit("load") for _ in range(3)] == [None, Delay(1.5, then_kill=False), None]
    assert faults.hit("store") is None


def test_hold_waits_for_its_file(tmp_path):
    import asyncio

    gate = tmp_path / "go"
    delay = Faults(parse(f"hold-at=load:1:{gate}")).hit("load")
    assert delay == Delay(0.0, then_kill=False, until=str(gate))

    async def held() -> bool:
        waiting = asyncio.ensure_future(delay.wait())
        await asyncio.sleep(0.1)
        was_waiting = not waiting.done()
        gate.write_text("")
        await asyncio.wait_for(waiting, 10)
        return was_waiting

    assert asyncio.run(held())


def test_kill_unit_delays_every_compute_of_the_unit_then_kills():
    faults = Faults(parse("kill-unit=4:0.25"))
    assert faults.hit("compute", unit=3) is None
    assert faults.hit("compute", unit=4) == Delay(0.25, then_kill=True)
    assert faults.hit("compute", unit=4) == Delay(0.25, then_kill=True)
