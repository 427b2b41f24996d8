"""SASS of many cubins from one nvdisasm run.

nvdisasm reads one image per run and spends about 0.28 s of CPU starting (building its tables for
every SM) against a few milliseconds decoding a kernel: over two hundred kernels, a minute of the
suite's CPU. Its raw mode (`-b SM90a`) decodes a bare instruction stream instead, so the code
sections of many cubins, laid end to end, are decoded in one run and the listing split back by
offset. The instructions are those of the ELF listing (test_sass_batch.py compares them); only
branch targets read as offsets rather than labels.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?;)")


def instructions(listing: str) -> list[tuple[int, str]]:
    """(offset, instruction) of each instruction line of an nvdisasm listing, raw or ELF."""
    return [(int(offset, 16), text) for offset, text in _INSTRUCTION.findall(listing)]


def tool(name: str) -> str | None:
    """A CUDA tool from PATH or from the nvidia-* wheels of this environment (the lock's)."""
    found = shutil.which(name)
    if found:
        return found
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = Path(sys.prefix) / "lib" / version / "site-packages"
    for candidate in (site / "nvidia").glob(f"*/bin/{name}"):
        return str(candidate)
    return None


def code_sections(cubin: bytes) -> bytes:
    """The `.text.*` sections of an ELF64 cubin, in section order, end to end."""
    (section_table,) = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i: int) -> tuple:  # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, ...
        return struct.unpack_from("<IIQQQQIIQQ", cubin, section_table + i * entry_size)

    names = header(names_index)[4]
    code = []
    for i in range(count):
        name_at, _, _, _, offset, size, *_ = header(i)
        name = cubin[names + name_at: cubin.index(b"\0", names + name_at)]
        if name.startswith(b".text."):
            code.append(cubin[offset: offset + size])
    return b"".join(code)


def disassemble_many(cubins: list[tuple[bytes, str]]) -> list[str]:
    """One listing (one instruction per line) per (cubin, ptxas -arch such as "sm_90a"), from one
    nvdisasm run per arch."""
    nvdisasm = tool("nvdisasm")
    assert nvdisasm, "nvdisasm missing: tools/bazel installs it from the lock (nvidia-cuda-nvdisasm)"
    listings = [""] * len(cubins)
    by_arch: dict[str, list[int]] = {}
    for i, (_, arch) in enumerate(cubins):
        by_arch.setdefault(arch.replace("sm_", "SM"), []).append(i)
    for arch, members in by_arch.items():
        codes = [code_sections(cubins[i][0]) for i in members]
        starts = [sum(len(c) for c in codes[:k]) for k in range(len(codes) + 1)]
        with tempfile.TemporaryDirectory() as folder:
            raw = Path(folder) / "code.bin"
            raw.write_bytes(b"".join(codes))
            text = subprocess.run([nvdisasm, "-b", arch, str(raw)], capture_output=True, text=True,
                                  check=True).stdout
        lines: list[list[str]] = [[] for _ in members]
        k = 0
        for at, instruction in instructions(text):
            while at >= starts[k + 1]:
                k += 1
            lines[k].append(instruction)
        for i, member in enumerate(members):
            listings[member] = "\n".join(lines[i])
    return listings
