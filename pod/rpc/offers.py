"""Tiles that owners offered this pod before it asked for them (`tileReady`).

An owner whose buffer becomes servable sends it to each peer its plan names as fetching that
buffer (the buffer's Free lists them): a same-host GPU owner its CUDA IPC handle, a CPU owner the
tile's header with its CRC-32C and a data-port ticket for that peer alone. The fetcher keeps the
offer here until its Fetch takes it: the fetch is then a device copy out of a mapping already
open, or straight the bulk transfer, with no round trip to the owner. A fetch that finds no offer
asks the owner (`ipcHandle`, `tileHeader`) as before, and so does one whose offered ticket no
longer works (a ticket expires after TICKET_TTL_S).

Why an offer stays valid until it is taken: the owner frees an offered buffer only after every
peer it offered it to has released it (its Free waits for them), and an offered buffer of a
generation the owner drops is kept aside, not reused, until the job is forgotten
(pod/runtime.py). So the bytes behind an offer are the complete tile until the fetcher says
it has them.

Pure bookkeeping on the pod's event loop; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.capnp_io import TileHeader

MAX_OFFERS = 1 << 16  # offers for jobs this pod never runs are dropped oldest first past this


@dataclass(frozen=True)
class Offer:
    handle: bytes  # the owner allocation's CUDA IPC handle (empty: a CPU owner's ticket)
    header: TileHeader  # shape, dtype and bytes of the tile; a CPU owner's: CRC-32C, port, ticket
    device: int  # the owner's device ordinal


class Offers:
    """Offers by (job, generation, owner node, owner buffer), each taken at most once."""

    def __init__(self, limit: int = MAX_OFFERS):
        self.limit = limit
        self._by_key: dict[tuple[str, int, int, int], Offer] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def put(self, job: str, generation: int, node: int, buffer: int, offer: Offer) -> None:
        key = (job, generation, node, buffer)
        self._by_key.pop(key, None)
        self._by_key[key] = offer
        while len(self._by_key) > self.limit:  # a late offer for a job gone from here: oldest first
            del self._by_key[next(iter(self._by_key))]

    def take(self, job: str, generation: int, node: int, buffer: int) -> Offer | None:
        return self._by_key.pop((job, generation, node, buffer), None)

    def drop(self, job: str, through_generation: int | None = None) -> None:
        """Forget the job's offers (of generations up to `through_generation`; None: all)."""
        for key in [k for k in self._by_key if k[0] == job
                    and (through_generation is None or k[1] <= through_generation)]:
            del self._by_key[key]
