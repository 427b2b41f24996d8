"""The one loader of phobos's Cap'n Proto schemas and the one set of reader limits.

`schema(name)` loads `schemas/<name>` (program.capnp, rpc.capnp, job.capnp) once per process;
`read_message(struct, data)` reads bytes under the limits below. It sits apart from the
converters (schemas/capnp_io.py, schemas/leaf_io.py) so that each of them can use it without
importing the other.
"""

from __future__ import annotations

import contextlib
import functools

import capnp

from common.paths import repo_file

# Explicit reader limits for every RPC connection and every message read from bytes (job files
# included): a message (or a chain of them) larger than this is refused instead of being
# traversed. 64 MiB in 8-byte words, matching Cap'n Proto's own default, stated here so every
# side agrees.
TRAVERSAL_LIMIT_WORDS = 64 * 1024 * 1024 // 8
NESTING_LIMIT = 64
# Tiles move in chunks this size (and never more than MAX_CHUNK_BYTES in one readChunk).
CHUNK_BYTES = 4 * 1024 * 1024
MAX_CHUNK_BYTES = 16 * 1024 * 1024


@functools.cache
def schema(name: str):
    """The loaded `schemas/<name>` module (loaded once per process; imports resolve beside it)."""
    path = repo_file(f"schemas/{name}")
    return capnp.load(str(path), imports=[str(path.parent)])


def rpc():
    """The RPC schema (`schemas/rpc.capnp`)."""
    return schema("rpc.capnp")


@contextlib.contextmanager
def read_message(struct, data: bytes):
    """A reader of `data` as `struct` (e.g. `rpc().Plan`), under the reader limits above."""
    with struct.from_bytes(data, traversal_limit_in_words=TRAVERSAL_LIMIT_WORDS,
                           nesting_limit=NESTING_LIMIT) as reader:
        yield reader
