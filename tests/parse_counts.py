"""Counting the kernel parses a test's process makes, by file name.

Counted where every parse of a module ends up: the parser's own `_Parser.module` (made only by
compiler/frontend/parser.py `parse`), not one of its callers, so that a new caller that parses
again (a second front end, a re-parse of printed text) is counted too. The generated leaves are
named "<cluster leaf NAME>" (compiler/cluster/leaves.py), which tells them apart from the job's
own kernel file.
"""

from __future__ import annotations

from collections import Counter


def count_parses(monkeypatch) -> Counter:
    """A Counter of file name -> modules parsed from that name, from now until the test ends."""
    from compiler.frontend import parser

    counts: Counter = Counter()
    real = parser._Parser.module

    def counting(self):
        counts[self.file] += 1
        return real(self)

    monkeypatch.setattr(parser._Parser, "module", counting)
    return counts


def leaf_parses(counts: Counter) -> dict[str, int]:
    return {name: n for name, n in counts.items() if "cluster leaf" in name}
