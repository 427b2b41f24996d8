"""The bulk tile path in-process: tickets are single-use, checksums catch corruption."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from pod.rpc.transfer import (
    CRC_PIECE,
    DataPort,
    TransferError,
    check_crc,
    checksum,
    chunk_ranges,
    crc32c_of,
    fetch_by_ticket,
)


@pytest.fixture
def port():
    data_port = DataPort("127.0.0.1")
    yield data_port
    data_port.close()


def test_ticket_moves_the_tile_once(port):
    tile = np.random.default_rng(3).standard_normal((300, 1000)).astype(np.float32)
    ticket = port.offer(tile)
    into = np.empty_like(tile)
    crc = fetch_by_ticket("127.0.0.1", port.port, ticket, into, timeout_s=5)
    np.testing.assert_array_equal(into, tile)
    assert crc == checksum(tile)
    with pytest.raises(TransferError, match="closed after 0 of"):
        fetch_by_ticket("127.0.0.1", port.port, ticket, np.empty_like(tile), timeout_s=5)


@pytest.mark.parametrize("nbytes", [4, CRC_PIECE - 4, CRC_PIECE, 2 * CRC_PIECE, 5 * CRC_PIECE + 12,
                                    16 * CRC_PIECE])
def test_the_crc_joined_from_pieces_is_the_tiles(port, nbytes):
    """The fetcher checksums whole pieces on two threads and joins them: the result must be
    the CRC-32C of the whole tile at every size around the piece's (and a flipped byte in any
    piece must change it)."""
    tile = np.frombuffer(np.random.default_rng(nbytes).bytes(nbytes), np.uint8).copy()
    into = np.empty_like(tile)
    crc = fetch_by_ticket("127.0.0.1", port.port, port.offer(tile), into, timeout_s=5)
    assert crc == checksum(tile)
    for at in {0, nbytes // 2, nbytes - 1}:
        bad = tile.copy()
        bad[at] ^= 1
        assert fetch_by_ticket("127.0.0.1", port.port, port.offer(bad), into, timeout_s=5) != crc


# CRC-32C check values: the CRC catalogue's "123456789", RFC 3720's (iSCSI) B.4 vectors
CRC32C_VECTORS = [
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


@pytest.mark.parametrize("data, expected", CRC32C_VECTORS)
def test_the_tile_checksum_is_the_standard_crc32c(data, expected):
    assert crc32c_of(data) == expected
    assert crc32c_of(data[5:], crc32c_of(data[:5])) == expected  # continued from the part before
    assert checksum(np.frombuffer(data, np.uint8)) == expected


def test_the_software_crc32c_gives_the_same_values():
    """Without SSE4.2 (or ARMv8's crc32 instructions) the package falls back to software: forced
    here (CRC32C_SW_MODE=force), it must give the standard values and the instruction's."""
    tile = np.random.default_rng(5).bytes(3 * CRC_PIECE + 7)
    code = ("import sys, crc32c; from pod.rpc.transfer import crc32c_of; "
            "data = sys.stdin.buffer.read(); "
            "print(crc32c.hardware_based, crc32c_of(b'123456789'), crc32c_of(data))")
    out = subprocess.run([sys.executable, "-c", code], input=tile, capture_output=True, check=True,
                         env={**os.environ, "CRC32C_SW_MODE": "force"}).stdout.split()
    assert out == [b"False", str(0xE3069283).encode(), str(crc32c_of(tile)).encode()]


def test_a_pod_imports_the_crc_only_at_its_first_checksum():
    """crc32c's package imports importlib.metadata (~40 ms): a pod's start-up must not pay it."""
    code = ("import sys, pod.cli, pod.rpc.server, pod.runtime, pod.rpc.peers, pod.rpc.transfer as t; "
            "before = 'crc32c' in sys.modules; t.checksum(t.np.zeros(3)); "
            "print(before, 'crc32c' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout.split()
    assert out == [b"False", b"True"]


def test_the_tile_checksum_lets_other_threads_run():
    """The fetcher's pieces are checksummed in a helper thread while the receiving thread reads:
    that needs the CRC to run without the GIL. With the interpreter's forced switches pushed out
    of reach, this thread can get the GIL back while the other checksums only if the checksum
    releases it; if it did not, the other thread would finish all its calls first."""
    big = memoryview(np.random.default_rng(6).bytes(16 * CRC_PIECE))
    calls, started = [], threading.Event()

    def checksums() -> None:
        started.set()
        for _ in range(50):
            crc32c_of(big)
            calls.append(1)

    crc32c_of(b"import the module first")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        worker = threading.Thread(target=checksums)
        worker.start()
        started.wait()
        done_when_back = len(calls)
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert done_when_back < 50


def test_unknown_ticket_gets_nothing(port):
    port.offer(np.zeros(4, np.float32))
    with pytest.raises(TransferError, match="closed after 0 of 16 bytes"):
        fetch_by_ticket("127.0.0.1", port.port, b"x" * 16, np.empty(4, np.float32), timeout_s=5)


def test_nothing_listening_is_a_transfer_error():
    closed = DataPort("127.0.0.1")
    number = closed.port
    closed.close()
    with pytest.raises(TransferError, match=f"127.0.0.1:{number}"):
        fetch_by_ticket("127.0.0.1", number, b"x" * 16, np.empty(4, np.float32), timeout_s=2)


def test_checksum_mismatch_is_named():
    tile = np.arange(10, dtype=np.float32)
    corrupted = tile.copy()
    corrupted[3] = 99
    with pytest.raises(TransferError, match="failed its checksum"):
        check_crc(checksum(corrupted), checksum(tile), "node 2")


def test_chunk_ranges_cover_everything_once():
    assert chunk_ranges(10, 4) == [(0, 4), (4, 4), (8, 2)]
    assert chunk_ranges(8, 4) == [(0, 4), (4, 4)]
    assert chunk_ranges(0, 4) == []
