"""common.cache: one folder for every cache, and a cache that can only ever be a shortcut."""

from __future__ import annotations

from pathlib import Path

from common import cache
from compiler.cuda.tuning import autotune
from scheduler.tuning import calibrate


def test_the_folder_is_the_environment_or_the_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "phobos"
    monkeypatch.setenv(cache.ENV, str(tmp_path / "elsewhere"))
    assert cache.cache_dir() == tmp_path / "elsewhere"


def test_every_cache_file_lives_in_that_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    assert autotune.cache_path().parent == tmp_path
    assert calibrate.cache_path().parent == tmp_path
    assert autotune.cache_path() != calibrate.cache_path()


def test_round_trip_and_broken_files_read_as_empty(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "new"))  # a folder that does not exist yet
    assert cache.read_json("x.json") == {}
    cache.write_json("x.json", {"a": [1, 2]})
    assert cache.read_json("x.json") == {"a": [1, 2]}
    Path(tmp_path / "new" / "x.json").write_text("{not json")
    assert cache.read_json("x.json") == {}
    Path(tmp_path / "new" / "x.json").write_text("[1, 2]")  # JSON, but not an object
    assert cache.read_json("x.json") == {}
