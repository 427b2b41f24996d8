"""The dataclasses the dataclass code cache's tests make, and what a user can see of them: kept
apart from pytest so that the same check runs under any Python (here 3.11; the H200 host's is 3.12)
without pytest installed:

    PYTHONPATH=. python3.12 tests/common/dataclass_samples.py

makes the sample classes plainly, then with the cache cold (compiled, written) and warm (read
back), and fails unless all three behave alike and have the same code objects.
"""

import contextlib
import dataclasses
import sys
import tempfile
import types


@contextlib.contextmanager
def _raises(kind):
    try:
        yield
    except kind:
        return
    raise AssertionError(f"{kind.__name__} not raised")


SAMPLE = '''
import dataclasses
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class Point:
    x: int
    y: int = 0
    tags: tuple = ()
    note: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class Point3(Point):
    z: int = 0
    items: list = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class Ident:
    name: str


@dataclass(order=True)
class Version:
    major: int
    minor: int = 0
    label: ClassVar[str] = "v"


@dataclass(slots=True, frozen=True)
class Slotted:
    a: int
    b: str = "b"


@dataclass(unsafe_hash=True)
class Hashed:
    k: int


@dataclass(kw_only=True)
class Keywords:
    a: int
    b: int = 2


@dataclass
class Mixed:
    a: int
    _: KW_ONLY
    b: int = 3


@dataclass
class Post:
    a: int
    scale: InitVar[int] = 2
    doubled: int = field(init=False, default=0)

    def __post_init__(self, scale):
        self.doubled = self.a * scale


@dataclass(frozen=True, match_args=False, repr=False)
class Quiet:
    a: int
'''

CLASSES = ("Point", "Point3", "Ident", "Version", "Slotted", "Hashed", "Keywords", "Mixed", "Post", "Quiet")
MODULE = "dcc_sample"


def define(source: str, name: str = MODULE) -> types.ModuleType:
    """A fresh module `name` made of `source` (dataclasses finds a class's globals through
    sys.modules while it makes the class)."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


def behaviour(m: types.ModuleType) -> list:
    """What a user of the sample's classes can observe, as plain values."""
    facts = []
    p = m.Point(1, 2, ("t",), note="n")
    facts += [repr(p), p == m.Point(1, 2, ("t",)), p == m.Point(1, 3), hash(p) == hash(m.Point(1, 2, ("t",))),
              m.Point.__match_args__, [f.name for f in dataclasses.fields(m.Point3)]]
    for change in (lambda: setattr(p, "x", 5), lambda: delattr(p, "y")):
        with _raises(dataclasses.FrozenInstanceError):
            change()
    q = m.Point3(1, z=4)
    facts += [repr(q), q.items, m.Point3(1).items is not m.Point3(1).items, repr(dataclasses.replace(q, z=9)),
              q == m.Point3(1, z=4), q == m.Point(1), m.Point3.__match_args__, dataclasses.astuple(q)]
    a, b = m.Ident("a"), m.Ident("a")
    facts += [a == b, a == a, hash(a) != hash(b) or a is b, repr(a)]
    facts += [repr(sorted([m.Version(2), m.Version(1, 5), m.Version(1)])), m.Version(1) < m.Version(1, 1),
              m.Version.label, [f.name for f in dataclasses.fields(m.Version)]]
    s = m.Slotted(1)
    facts += [repr(s), m.Slotted.__slots__, hasattr(s, "__dict__"), s == m.Slotted(1, "b")]
    with _raises(dataclasses.FrozenInstanceError):
        s.a = 2
    facts += [hash(m.Hashed(3)) == hash(m.Hashed(3)), repr(m.Keywords(a=1)), m.Keywords.__match_args__]
    with _raises(TypeError):
        m.Keywords(1)
    facts += [repr(m.Mixed(1, b=4)), m.Mixed.__match_args__, repr(m.Post(3)), repr(m.Post(3, 5)),
              hasattr(m.Quiet, "__match_args__"), repr(m.Quiet(1)).startswith("<")]
    match m.Point3(7, 8):
        case m.Point3(x, y):
            facts.append((x, y))
    return facts


def methods(m: types.ModuleType) -> dict:
    """The methods dataclasses made, down to their code objects."""
    out = {}
    for cls_name in CLASSES:
        cls = getattr(m, cls_name)
        for name, fn in vars(cls).items():
            if isinstance(fn, types.FunctionType) and fn.__code__.co_filename == "<string>":
                code = fn.__code__
                out[cls_name, name] = (code, code.co_filename, code.co_firstlineno, fn.__qualname__,
                                       *map(repr, (fn.__annotations__, fn.__defaults__, fn.__kwdefaults__)))
    return out


def three_ways(folder: str) -> tuple[list, dict, dict]:
    """The sample made plainly, with the cache cold in `folder`, then warm from it: the three
    modules, the cache's counts cold and warm."""
    from common import dataclass_code_cache as dcc

    plain = define(SAMPLE)
    dcc.install(folder)
    try:
        cold = define(SAMPLE)
        cold_stats = dcc.stats()
        dcc.save()
    finally:
        dcc.uninstall()
    dcc.install(folder)
    try:
        warm = define(SAMPLE)
        warm_stats = dcc.stats()
    finally:
        dcc.uninstall()
    return [plain, cold, warm], cold_stats, warm_stats


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        modules, cold, warm = three_ways(folder)
    seen = [behaviour(m) for m in modules]
    code = [methods(m) for m in modules]
    assert seen[0] == seen[1] == seen[2], "the classes behave differently"
    assert code[0] == code[1] == code[2] and len(code[0]) >= 30, "their methods' code differs"
    assert cold["compiled"] > 0 and warm["compiled"] == 0, (cold, warm)
    print(f"Python {sys.version.split()[0]}: the same behaviour and code, {len(code[0])} methods; "
          f"cold {cold}, warm {warm}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
