"""The bulk tile path in-process: tickets are single-use, checksums catch corruption."""

from __future__ import annotations

import numpy as np
import pytest

from pod.transfer import (
    CRC_PIECE,
    DataPort,
    TransferError,
    check_crc,
    checksum,
    chunk_ranges,
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
def test_the_crc32_joined_from_pieces_is_the_tiles(port, nbytes):
    """The fetcher checksums whole pieces on two threads and joins them: the result must be
    zlib's crc32 of the whole tile at every size around the piece's (and a flipped byte in any
    piece must change it)."""
    tile = np.frombuffer(np.random.default_rng(nbytes).bytes(nbytes), np.uint8).copy()
    into = np.empty_like(tile)
    crc = fetch_by_ticket("127.0.0.1", port.port, port.offer(tile), into, timeout_s=5)
    assert crc == checksum(tile)
    for at in {0, nbytes // 2, nbytes - 1}:
        bad = tile.copy()
        bad[at] ^= 1
        assert fetch_by_ticket("127.0.0.1", port.port, port.offer(bad), into, timeout_s=5) != crc


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
