"""The code objects that `dataclasses` compiles, kept on disk so that a program's start-up does
not compile them again.

Why. A @dataclass gets its methods (__init__, __repr__, __eq__, __hash__; __setattr__ and
__delattr__ when frozen) from source text that `dataclasses` generates and compiles with `exec`,
one text per method. The command makes about 100 dataclasses as it imports, the pod as many:
~600 texts each, whose compiling was the largest single item of either process's start-up
(py-spy, session 9: ~70 ms of CPU each on the project's 2-core VM). The texts are the same run
after run, so their code can be kept, as Python keeps a module's own in __pycache__.

How. `dataclasses` (3.10 to 3.13 alike) calls the global name `exec(text, globals, locals)`.
`install` defines that name in the `dataclasses` module alone (the builtin is untouched for
everyone else) as a function that takes the code stored for exactly that text, or compiles the
text as exec would (file name "<string>", no future flags: dataclasses has none; checked), and
runs the builtin exec on it with the same namespaces. The key is the whole text, so code is only
ever used for the source it was compiled from, and no dataclass behaves differently. A Python
whose `dataclasses` no longer calls `exec` that way is left alone: no cache, no error.

Who. Only the two programs install it, first thing (scheduler/cli.py's and pod/cli.py's entry
points, and pod/main.py before it imports pod.cli): never the Python API, since replacing part of
a standard module is a program's choice, not a library's to make for its user's process. The
command has not imported `dataclasses` yet at that point (it starts its pods first), so `install`
leaves a finder on sys.meta_path that wraps that one import and puts the function in once the
module has run; a pod forked from the command inherits the installation, and its own `install`
is then a no-op.

Where. One file per module defining dataclasses (the `__name__` of the globals `dataclasses`
passes), under <cache folder>/dataclass-code/<cache tag>/ (common/cache.py; the tag, e.g.
cpython-311, keeps interpreters apart). Per module rather than one file, by measurement: reading
and checking the 31 files of the command's modules took 1.4 ms, one file of the same 586 entries
(587 KB) 1.5 ms, against ~70 ms to compile them; a module's file is read only when it makes its
first dataclass, so a program reads only its own modules'; and stale entries end by themselves:
a module's file is rewritten, with exactly the texts this process took from it, whenever one of
them was missing, so an edited dataclass replaces its old code rather than adding to it.

A file: a header (this format, importlib's MAGIC_NUMBER, marshal's version, the -O level), then
the CRC-32 and length of a marshalled {text: code} dict. Anything wrong (missing, unreadable,
truncated, corrupt, another interpreter's) reads as empty. Files are written only for modules
that missed, atomically (common/atomic.py), and off the programs' critical path: the command's
once its imports are done, in a thread beside its job; the pod's in the thread that imports its
first job's modules while it waits for its scheduler; what is left when a program leaves
(common/cli.py). A pod stopped by SIGTERM (the command's own are) never leaves that way, so a
module it first imported during a job would be compiled again every run: a CPU pod has none (all
its dataclasses are made by its start-up and first-job modules). A folder that cannot be written
is skipped, silently.

Trust. Like __pycache__, a file here is code the process runs: anyone who can write it can run
code as the user. It lives in the user's own cache folder, is written 0600, and is ignored unless
this user owns it and nobody else may write it (PHOBOS_CACHE_DIR may point at a shared folder).
PYTHONDONTWRITEBYTECODE is not followed: it keeps Python from writing .pyc files beside the
sources (a read-only or shared tree, a clean image); this cache writes only into phobos's own
cache folder, as its PTX and tuning caches always have (docs/runtime.md).
"""

import _thread
import builtins
import marshal
import os
import stat
import sys

FOLDER = "dataclass-code"
_FORMAT = b"phobos dataclass code 1\n"
_SUFFIX = ".marshal"
_STALE_TEMP_S = 3600.0  # a temporary file this old was left by a process killed while writing
# The future features that change what a compile makes (the others are the language by now): exec
# compiles under those of its caller's code, this file's compile under none.
_FUTURES = ("annotations", "barry_as_FLUFL")
_header_bytes: bytes | None = None
_fork_handler = False


class _Module:
    """One defining module's entries: those read from its file, those this process used, and
    whether any was missing (its file is then due to be rewritten)."""

    __slots__ = ("stored", "used", "missed")

    def __init__(self, stored: dict):
        self.stored = stored
        self.used: dict = {}
        self.missed = False


class _Cache:
    def __init__(self, folder: str):
        self.folder = folder
        self.modules: dict[str, _Module] = {}
        self.active = False  # the function sits in `dataclasses`
        self.hits = self.compiled = self.files_read = self.files_written = 0
        self.lock = _thread.allocate_lock()  # one save at a time
        self.writer = None  # the thread of save_in_background, while it runs

    def code(self, text: str, globals: dict):
        """The code object of `text`, as `exec(text, globals)` in `dataclasses` compiles it."""
        name = globals.get("__name__")
        module = self.modules.get(name) if type(name) is str else None
        if module is None and _file_name_ok(name):
            module = self.modules.setdefault(name, _Module(self._read(name)))
        if module is not None:
            code = module.used.get(text) or module.stored.get(text)
            if code is not None:
                self.hits += 1
                module.used[text] = code
                return code
        code = compile(text, "<string>", "exec", 0, True)
        self.compiled += 1
        if module is not None:
            module.used[text] = code
            module.missed = True  # after the entry: a save that clears it has seen the entry
        return code

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name + _SUFFIX)

    def _read(self, name: str) -> dict:
        try:
            # O_NONBLOCK: a FIFO put in the file's place is not waited on (and is refused below)
            with open(os.open(self.path(name), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                    return {}  # not a file, or code another user could have written
                data = f.read()
        except OSError:
            return {}
        entries = decode(data)
        self.files_read += bool(entries)
        return entries

    def save(self, wait_s: float = -1) -> list[str]:
        """Write the file of every module that missed an entry; the modules written. `wait_s`:
        how long to wait for another thread's save (-1: as long as it takes)."""
        if not self.lock.acquire(timeout=wait_s):
            return []  # another thread's save is stuck (a hung file system): leave the cache be
        try:
            due = [(name, m) for name, m in list(self.modules.items()) if m.missed]
            return self._write(due) if due else []
        finally:
            self.lock.release()

    def _write(self, due: list[tuple[str, _Module]]) -> list[str]:
        from common.atomic import write_atomically
        from common.errors import UserError

        written = []
        try:
            os.makedirs(self.folder, exist_ok=True)
            for name, module in due:
                module.missed = False  # before the copy: an entry added after it marks it again
                data = encode(dict(module.used))
                write_atomically(self.path(name), data, mode=0o600)
                written.append(name)
            _remove_stale_temporaries(self.folder)
        except (OSError, UserError, ValueError):  # a folder we may not write, or code marshal
            pass  # cannot store (none that dataclasses makes): the cache stays as it is
        self.files_written += len(written)
        return written


_cache: _Cache | None = None


def install(folder: str | None = None) -> None:
    """Keep the code `dataclasses` compiles under `folder` (default: the phobos cache folder's
    dataclass-code/<cache tag>/) from now on in this process. For the programs' entry points
    only; a second call does nothing."""
    global _cache, _fork_handler
    if _cache is not None or sys.implementation.cache_tag is None:
        return
    if folder is None:
        from common import cache

        try:
            folder = os.path.join(cache.cache_dir(), FOLDER, sys.implementation.cache_tag)
        except (RuntimeError, KeyError, OSError):  # no home folder to find: no cache, no error
            return
    _cache = _Cache(os.path.abspath(folder))  # the same folder after a chdir (a forked pod's)
    if not _fork_handler:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_handler = True
    module = sys.modules.get("dataclasses")
    if module is None:
        sys.meta_path.insert(0, _DataclassesFinder())
    else:
        _put_into(module)


def uninstall() -> None:
    """Undo `install`: `dataclasses` calls the builtin exec again (tests use it)."""
    global _cache
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _DataclassesFinder)]
    module = sys.modules.get("dataclasses")
    if module is not None and vars(module).get("exec") is _exec:
        del module.exec
    _cache = None


def active() -> bool:
    """Whether the code `dataclasses` compiles is being cached in this process."""
    return _cache is not None and _cache.active


def stats() -> dict[str, int]:
    """This process's counts: dataclass methods found (hits) and compiled, files read, written."""
    c = _cache if _cache is not None and _cache.active else None
    names = ("hits", "compiled", "files_read", "files_written")
    return {name: getattr(c, name) if c is not None else 0 for name in names}


def save() -> list[str]:
    """Write what was missing now (in the caller's thread); the modules whose files were written."""
    return _cache.save() if _cache is not None else []


def save_in_background() -> None:
    """`save` in a thread of its own, when anything is due: for a program whose imports are done
    and which has other work to do (`settle` waits for the thread)."""
    c = _cache
    busy = c is not None and c.writer is not None and c.writer.is_alive()
    if c is None or busy or not any(m.missed for m in list(c.modules.values())):
        return
    import threading

    c.writer = threading.Thread(target=c.save, name="dataclass-code-cache", daemon=True)
    c.writer.start()


def settle(timeout_s: float = 2.0) -> None:
    """Before a program leaves: the background save finished (a file half written is only a
    stray temporary, but one all the same) and whatever is still due written. Waits for
    another's save `timeout_s` at most: the background writer, or the thread that saves a pod's
    modules (pod/cli.py), stuck on a hung file system, does not keep the program from leaving."""
    import time

    c = _cache
    if c is None:
        return
    deadline = time.monotonic() + timeout_s
    if c.writer is not None:
        c.writer.join(timeout_s)
        if c.writer.is_alive():  # a hung file system: leave, and leave the cache as it is
            return
    c.save(wait_s=max(0.0, deadline - time.monotonic()))


def encode(entries: dict) -> bytes:
    """A module's file: header, CRC-32 and length of the payload, the marshalled entries."""
    import zlib

    payload = marshal.dumps(entries)
    check = zlib.crc32(payload).to_bytes(4, "little") + len(payload).to_bytes(8, "little")
    return _header() + check + payload


def decode(data: bytes) -> dict:
    """The entries of a module's file, or {} for anything but a whole, intact file of this
    interpreter's."""
    import zlib

    header = _header()
    start = len(header) + 12
    if len(data) < start or not data.startswith(header):
        return {}
    crc = int.from_bytes(data[len(header):len(header) + 4], "little")
    size = int.from_bytes(data[len(header) + 4:start], "little")
    payload = memoryview(data)[start:]
    if len(payload) != size or zlib.crc32(payload) != crc:
        return {}
    try:
        entries = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return {}
    if type(entries) is not dict:
        return {}
    code_type = type(decode.__code__)
    if not all(type(k) is str and type(v) is code_type for k, v in entries.items()):
        return {}
    return entries


def _header() -> bytes:
    """What a file must begin with to be this interpreter's: importlib's MAGIC_NUMBER changes
    with the bytecode, marshal's version with its format, and the -O level with what compiles."""
    global _header_bytes
    if _header_bytes is None:
        from importlib.util import MAGIC_NUMBER

        _header_bytes = _FORMAT + MAGIC_NUMBER + bytes((marshal.version, min(sys.flags.optimize, 255)))
    return _header_bytes


def _file_name_ok(name) -> bool:
    return type(name) is str and 0 < len(name) <= 200 and name.replace(".", "_").isidentifier()


def _exec(source, globals=None, locals=None, /, **kwargs):
    """`exec` as `dataclasses` calls it: the source's code from the cache, then the builtin."""
    c = _cache
    if c is not None and type(source) is str and type(globals) is dict and not kwargs:
        return builtins.exec(c.code(source, globals), globals, locals)
    if globals is None:  # exec's default namespaces are its caller's, not this function's
        caller = sys._getframe(1)
        globals = caller.f_globals
        locals = caller.f_locals if locals is None else locals
    return builtins.exec(source, globals, locals, **kwargs)


def _put_into(module) -> None:
    """Make `_exec` the `exec` of `module` (dataclasses), if it calls exec as this file expects."""
    if _cache is None or not _calls_exec_plainly(module):
        return
    module.exec = _exec
    _cache.active = True


def _calls_exec_plainly(module) -> bool:
    """Whether the code of `module` reads a global `exec` that it does not define itself, none of
    it under a future feature that would change what its exec compiles."""
    if "exec" in vars(module):
        return False
    import __future__

    future = 0
    for feature in _FUTURES:
        future |= getattr(__future__, feature).compiler_flag
    calls = False
    for value in list(vars(module).values()):
        for fn in list(vars(value).values()) if isinstance(value, type) else (value,):
            code = getattr(fn, "__code__", None)
            if code is None or getattr(fn, "__module__", None) != module.__name__:
                continue
            if code.co_flags & future:
                return False
            calls = calls or "exec" in code.co_names
    return calls


class _DataclassesFinder:
    """A meta path finder for `dataclasses` alone: the spec the other finders give, its loader
    wrapped so that the module gets `_exec` once it has run. It leaves sys.meta_path at once."""

    def find_spec(self, name, path=None, target=None):
        if name != "dataclasses":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenPutInto(spec.loader)
        return spec


class _ThenPutInto:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader  # as if never wrapped
        self.loader.exec_module(module)
        _put_into(module)


def _after_fork_in_child() -> None:
    """In a forked child (the command's CPU pod): its own counts, lock and writer, and none of
    its parent's misses, which are the parent's to write."""
    c = _cache
    if c is None:
        return
    c.lock = _thread.allocate_lock()
    c.writer = None
    c.hits = c.compiled = c.files_read = c.files_written = 0
    for module in list(c.modules.values()):
        module.missed = False


def _remove_stale_temporaries(folder: str) -> None:
    """Temporary files of writers killed mid-write (a pod is stopped by SIGTERM): gone after an hour."""
    import time

    now = time.time()
    for entry in os.scandir(folder):
        if entry.name.startswith(".") and entry.name.endswith(".tmp"):
            try:
                if now - entry.stat().st_mtime > _STALE_TEMP_S:
                    os.unlink(entry.path)
            except OSError:
                pass
