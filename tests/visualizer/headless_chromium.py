"""Headless Chromium for the report's tests: dump the DOM after scripts ran, take screenshots."""

from __future__ import annotations

import html.parser
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--enable-logging=stderr", "--v=0",
)


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass(frozen=True)
class BrowserRun:
    stdout: str
    stderr: str

    def uncaught_errors(self) -> list[str]:
        """Lines of Chromium's console log that report a script error."""
        return [line for line in self.stderr.splitlines() if "Uncaught" in line]


def _run(page: Path, profile: Path, extra: list[str], timeout: float, fragment: str = "") -> BrowserRun:
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium is not installed")
    cmd = [chromium, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri() + fragment]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return BrowserRun(done.stdout, done.stderr)


def dump_dom(page: Path, profile: Path, timeout: float = 60, fragment: str = "") -> BrowserRun:
    return _run(page, profile, ["--dump-dom"], timeout, fragment)


def screenshot(page: Path, png: Path, profile: Path, size: str = "1400,1000", timeout: float = 60,
               fragment: str = "") -> BrowserRun:
    return _run(page, profile, ["--hide-scrollbars", f"--screenshot={png}", f"--window-size={size}"], timeout,
                fragment)


class _Finder(html.parser.HTMLParser):
    """Collects the attributes of elements by id, and the text inside #js-errors."""

    def __init__(self):
        super().__init__()
        self.by_id: dict[str, dict[str, str]] = {}
        self.counts: dict[str, int] = {}
        self.error_text: list[str] = []
        self._error_depth = 0

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.by_id[a["id"]] = a
        for cls in a.get("class", "").split():
            self.counts[cls] = self.counts.get(cls, 0) + 1
        if self._error_depth or a.get("id") == "js-errors":
            self._error_depth += 1

    def handle_endtag(self, tag):
        if self._error_depth:
            self._error_depth -= 1

    def handle_data(self, data):
        if self._error_depth and data.strip():
            self.error_text.append(data.strip())


@dataclass(frozen=True)
class Page:
    report: dict[str, str]  # the data-* attributes of #report, without the "data-" prefix
    by_id: dict[str, dict[str, str]]
    class_counts: dict[str, int]
    js_errors: list[str]


def parse_dom(dom: str) -> Page:
    finder = _Finder()
    finder.feed(dom)
    report = {k[5:]: v for k, v in finder.by_id.get("report", {}).items() if k.startswith("data-")}
    return Page(report, finder.by_id, finder.counts, finder.error_text)
