"""common/options.py: the environment read into one typed value, afresh at each call."""

from __future__ import annotations

from pathlib import Path

import pytest

from common import options
from common.errors import UserError

VARIABLES = ("PHOBOS_CACHE_DIR", "PHOBOS_RETUNE", "PHOBOS_TUNE_QUIET", "PHOBOS_CUDA_DUMP",
             "PHOBOS_DUMP_STAGES", "PHOBOS_CUDA_TMA", "PHOBOS_CUDA_DOT_UNROLL", "PHOBOS_NVRTC", "CUDA_HOME",
             "CUDA_PATH", "PHOBOS_TOKEN", "PHOBOS_POD_MODULE", "CUDA_VISIBLE_DEVICES",
             "BUILD_WORKING_DIRECTORY", "PHOBOS_FAULT", "PHOBOS_COMMIT_FAULT", "PHOBOS_TEST_TICKET_TTL_S",
             "PHOBOS_SETUP_DONE")


@pytest.fixture
def bare(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_without_any_variable(bare):
    assert options.current() == options.Options()
    assert options.Options().pod_module == "pod.main" and options.Options().cuda_tma


def test_each_variable_reaches_its_field(bare):
    for name, value in {"PHOBOS_CACHE_DIR": "/tmp/c", "PHOBOS_RETUNE": "1", "PHOBOS_TUNE_QUIET": "1",
                        "PHOBOS_CUDA_DUMP": "/tmp/d", "PHOBOS_DUMP_STAGES": "check", "PHOBOS_CUDA_TMA": "0",
                        "PHOBOS_CUDA_DOT_UNROLL": "4", "PHOBOS_NVRTC": "/x/libnvrtc.so", "CUDA_PATH": "/cuda",
                        "PHOBOS_TOKEN": "t" * 32, "PHOBOS_POD_MODULE": "tests.fake_pod",
                        "CUDA_VISIBLE_DEVICES": "", "PHOBOS_FAULT": "kill-unit=0:1",
                        "PHOBOS_TEST_TICKET_TTL_S": "0.5", "PHOBOS_SETUP_DONE": "1765100000.25"}.items():
        bare.setenv(name, value)
    got = options.current()
    assert got.cache_dir == Path("/tmp/c") and got.retune and got.tune_quiet
    assert got.cuda_dump == Path("/tmp/d")
    assert got.dump_stages == "check" and not got.cuda_tma and got.dot_unroll == 4
    assert got.nvrtc == "/x/libnvrtc.so" and got.cuda_homes == ("/cuda",) and got.token == "t" * 32
    assert got.pod_module == "tests.fake_pod" and got.fault == "kill-unit=0:1" and got.ticket_ttl_s == 0.5
    assert got.visible_devices == ""  # set but empty: no GPU, unlike unset
    assert got.setup_done == 1765100000.25


def test_empty_counts_as_unset_and_changes_show_at_the_next_call(bare):
    bare.setenv("PHOBOS_CACHE_DIR", "")
    assert options.current().cache_dir is None
    bare.setenv("PHOBOS_CACHE_DIR", "/tmp/later")
    assert options.current().cache_dir == Path("/tmp/later")


def test_a_value_of_the_wrong_type_names_its_variable(bare):
    bare.setenv("PHOBOS_CUDA_DOT_UNROLL", "four")
    with pytest.raises(options.OptionError, match=r"\$PHOBOS_CUDA_DOT_UNROLL='four' is not an integer"):
        options.current()
    assert isinstance(options.OptionError("x"), UserError)  # a command prints one line, exit 2


def test_a_setup_stamp_that_is_no_number_counts_as_unset(bare):
    bare.setenv("PHOBOS_SETUP_DONE", "soon")  # tools/bazel's, not the user's: no error for it
    assert options.current().setup_done == 0.0


def test_environment_is_a_copy(bare):
    env = options.environment()
    env["PHOBOS_FAULT"] = "x"
    assert options.current().fault == ""


@pytest.mark.parametrize(("name", "value"),
                         [("PHOBOS_CUDA_DOT_UNROLL", "four"), ("PHOBOS_SPLIT_ONE_LAUNCH", "2")])
def test_a_bad_value_prints_one_error_prefix(bare, name, value):
    """UserError.render adds the 'error: ' prefix; a message that wrote its own printed it twice."""
    bare.setenv(name, value)
    with pytest.raises(options.OptionError) as raised:
        options.current()
    printed = raised.value.render()
    assert printed.startswith(f"error: ${name}=") and printed.count("error:") == 1, printed
