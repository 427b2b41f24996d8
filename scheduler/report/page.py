"""One self-contained HTML report of a run: the kernel, its super-tiles, and every instruction.

    python -m scheduler.report.page trace.json -o run.html

The page needs no server and no network: the script, the styles and the data are inline.
`write_report(trace, path)` is what the scheduler calls at the end of a run given --report.
The pipeline is trace -> model.build_model (pure, checked) -> HTML text -> atomic write.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from functools import cache
from html import escape
from pathlib import Path

from common.atomic import write_atomically
from common.cli import run_main, user_path
from common.errors import UserError
from scheduler.report.model import build_model

ASSETS = Path(__file__).resolve().parent / "assets"
# The page's script, in parts that share one scope (report.html wraps them in one strict function).
SCRIPT_PARTS = ("base.js", "code.js", "grids.js", "timeline.js", "panels.js", "main.js")
_MARKER = re.compile(r"@@(TITLE|CSS|ERROR_HOOK|DATA|SCRIPT)@@")


@cache
def _asset(name: str) -> str:
    try:
        return (ASSETS / name).read_text(encoding="utf-8")
    except OSError as err:  # a broken install, not a user mistake: let it show
        raise RuntimeError(f"report asset missing: {ASSETS / name} (are its assets packaged?)") from err


def _json_for_script(value) -> str:
    """JSON safe inside <script>: no '</' can end the element, no U+2028/9 can break the JS."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_html(model: dict) -> str:
    title = f"phobos run: {model['kernel'] or 'kernel'}"
    parts = {
        "TITLE": escape(title),
        "CSS": _asset("report.css"),
        "ERROR_HOOK": _asset("error_hook.js"),
        "DATA": _json_for_script(model),
        "SCRIPT": "\n".join(_asset(name) for name in SCRIPT_PARTS),
    }
    # One pass, so that a marker-like text inside the data (a kernel's source) is left alone.
    return _MARKER.sub(lambda m: parts[m.group(1)], _asset("report.html"))


def build_report(trace: dict) -> str:
    """The report page's HTML text for a trace (raises UserError when the trace is malformed)."""
    return render_html(build_model(trace))


def write_report(trace: dict, path: str | os.PathLike) -> None:
    """Write the HTML report of `trace` (a phobos-trace/1 dict) to `path`; nothing half-written."""
    write_atomically(path, build_report(trace))


def load_trace(path: str | os.PathLike) -> dict:
    """Read a trace file, turning a missing or unreadable file into one clear UserError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"trace file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read trace file {path}: {err}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.report.page", description="Make the HTML report of a saved phobos trace."
    )
    parser.add_argument("trace", help="trace JSON written by the scheduler with --trace")
    parser.add_argument("-o", "--output", required=True, help="HTML file to write")
    args = parser.parse_args(argv)
    trace = load_trace(user_path(args.trace))
    out = user_path(args.output)
    write_report(trace, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
