"""The tuner's flags: sizes, checks, and the figures they give with the pods' defaults."""

from __future__ import annotations

import argparse

import pytest

from common.errors import UserError
from scheduler.tuning import tuner_cli
from scheduler.tuning.tuner_cli import DEFAULTS, TuneOptions, base_figures, parse_size


def parse(*argv: str) -> TuneOptions:
    p = argparse.ArgumentParser()
    tuner_cli.add_arguments(p)
    return tuner_cli.options_from_args(p.parse_args(list(argv)))


def test_sizes():
    assert parse_size("80GiB") == 80 * 2**30
    assert parse_size("512MB") == 512 * 10**6
    assert parse_size("8e10") == 8 * 10**10
    assert parse_size("1.5 Ki") == 1536
    for bad in ("lots", "-1GiB", "0", "3 parsecs"):
        with pytest.raises(UserError, match="--vram"):
            parse_size(bad)


def test_flags_and_their_checks():
    t = parse("--autotune", "--nodes", "4", "--vram", "80GiB", "--leaf-flops", "40e12", "--link-bw", "50e9",
              "--storage-bw", "2e9", "--launch-overhead", "1e-5")
    assert (t.autotune, t.nodes, t.vram_bytes, t.leaf_flops, t.link_bw, t.storage_bw, t.launch_s) == \
        (True, 4, 80 * 2**30, 40e12, 50e9, 2e9, 1e-5)
    assert t.active and not parse().active and parse("--tune-leaves").active
    with pytest.raises(UserError, match="--calibrate and --tune-only go with --autotune"):
        parse("--calibrate")
    with pytest.raises(UserError, match="--link-bw must be positive"):
        parse("--autotune", "--link-bw", "0")
    with pytest.raises(UserError, match="--nodes must be at least 1"):
        parse("--autotune", "--nodes", "0")


def test_figures_default_to_the_pods():
    f = base_figures(TuneOptions(autotune=True), 3, ["cpu"] * 3, [8 << 30, 4 << 30, 6 << 30])
    assert (f.nodes, f.vram_bytes, f.leaf_flops, f.link_bw) == (3, 4 << 30, DEFAULTS["cpu"]["leaf_flops"],
                                                                DEFAULTS["cpu"]["link_bw"])
    assert f.source == "defaults for CPU pods"
    given = TuneOptions(autotune=True, nodes=2, vram_bytes=1 << 30, leaf_flops=1e12)
    g = base_figures(given, 2, ["gpu", "gpu"], [80 << 30] * 2)
    assert (g.nodes, g.vram_bytes, g.leaf_flops, g.link_bw) == (2, 1 << 30, 1e12, DEFAULTS["gpu"]["link_bw"])
    assert g.source == "command line and defaults"
    with pytest.raises(UserError, match="--nodes 5: only 2 pod"):
        base_figures(TuneOptions(autotune=True, nodes=5), 2, ["cpu"] * 2, [0, 0])
    # a table for a bigger cluster than the one connected is fine when nothing runs
    bigger = TuneOptions(autotune=True, tune_only=True, nodes=5)
    assert base_figures(bigger, 2, ["cpu"] * 2, [0, 0]).nodes == 5
