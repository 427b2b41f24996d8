"""pod/backends/ipc_mappings.py: a mapping of a peer allocation is opened once and kept across jobs; each
copy out of it pins it until the copy is seen done; it closes only when nothing pins it, and then
only past the idle bounds or when its owner is lost, with its last copy for the caller to wait for."""

from pod.backends.ipc_mappings import IpcMappings

MIB = 1 << 20


def _open(maps: IpcMappings, handle: bytes, pointer: int, nbytes: int = MIB, owner: str = "pod-a",
          copy: object = "event") -> None:
    """A first copy out of `handle`: not mapped yet, so opened (pinned for that copy)."""
    assert maps.pin(handle, copy) is None  # not open yet: nothing pinned, the caller opens it
    assert maps.opened(handle, pointer, nbytes, owner, copy) == (pointer, None)


def _copy(maps: IpcMappings, handle: bytes, pointer: int, copy: object = "event") -> list:
    """One more copy out of an open mapping, seen done: what closes at its end."""
    assert maps.pin(handle, copy) == pointer
    return maps.unpin(handle)


def test_a_mapping_outlives_the_copy_that_opened_it_and_serves_the_next_ones():
    maps = IpcMappings()
    _open(maps, b"x", 100)
    assert maps.idle() == []  # pinned by its first copy
    assert maps.unpin(b"x") == []  # idle now, kept
    assert maps.idle() == [b"x"]
    assert _copy(maps, b"x", 100) == []  # the next job's tile in the same owner allocation
    assert maps.idle() == [b"x"] and len(maps) == 1


def test_a_pinned_mapping_never_closes_however_far_past_the_bounds():
    maps = IpcMappings(idle_bytes=0, idle_count=0)  # no idle mapping kept at all
    _open(maps, b"x", 100)
    assert maps.pin(b"x", "second") == 100  # a second copy (another job's) while the first runs
    _open(maps, b"y", 200)
    assert [m.pointer for m in maps.unpin(b"y")] == [200]  # y: idle, past the bound
    assert maps.unpin(b"x") == []  # the second copy still pins x
    assert [m.pointer for m in maps.unpin(b"x")] == [100] and len(maps) == 0


def test_idle_mappings_past_the_byte_bound_close_least_recently_used_first():
    maps = IpcMappings(idle_bytes=3 * MIB, idle_count=100)
    for i, handle in enumerate((b"a", b"b", b"c")):
        _open(maps, handle, 100 + i)
        assert maps.unpin(handle) == []  # up to 3 MiB idle: at the bound, all kept
    assert maps.pin(b"a", "e") == 100  # a is in use again
    _open(maps, b"d", 103, nbytes=2 * MIB)
    assert maps.unpin(b"a") == []  # a idle again, the most recently used: 3 MiB idle
    closed = maps.unpin(b"d")  # d (2 MiB) goes idle beside b, c and a: 5 MiB, 2 over
    assert [m.pointer for m in closed] == [101, 102]  # b, then c: the least recently used
    assert maps.idle() == [b"a", b"d"]


def test_idle_mappings_past_the_count_bound_close_too():
    maps = IpcMappings(idle_bytes=1 << 40, idle_count=2)
    closed = []
    for i, handle in enumerate((b"a", b"b", b"c")):
        _open(maps, handle, 100 + i)
        closed += maps.unpin(handle)
    assert [m.pointer for m in closed] == [100]
    assert maps.idle() == [b"b", b"c"] and len(maps) == 2


def test_a_mapping_opened_twice_keeps_the_first_and_hands_back_the_second():
    maps = IpcMappings(idle_bytes=0)
    _open(maps, b"x", 100, copy="first")
    # another thread's open of the same handle, for its own copy: that copy uses (and pins) the
    # kept mapping, and its caller closes the pointer it opened
    assert maps.opened(b"x", 101, MIB, "pod-a", "second") == (100, 101)
    assert maps.unpin(b"x") == []  # the second copy still pins it
    (mapping,) = maps.unpin(b"x")
    assert mapping.pointer == 100 and mapping.last_copy == "second"


def test_a_closing_mapping_carries_its_last_copy_for_the_caller_to_wait_for():
    maps = IpcMappings(idle_bytes=0)
    _open(maps, b"x", 100, copy="event-1")
    assert maps.pin(b"x", "event-2") == 100
    assert maps.unpin(b"x") == []
    (mapping,) = maps.unpin(b"x")
    assert mapping.last_copy == "event-2"


def test_a_lost_owner_closes_its_idle_mappings_now_and_its_pinned_ones_when_their_copies_end():
    maps = IpcMappings()
    _open(maps, b"idle", 100, owner="pod-a")
    maps.unpin(b"idle")
    _open(maps, b"busy", 200, owner="pod-a")
    _open(maps, b"other", 300, owner="pod-b")
    maps.unpin(b"other")
    assert [m.pointer for m in maps.drop_owner("pod-a")] == [100]  # busy: a copy may be running
    assert [m.pointer for m in maps.unpin(b"busy")] == [200]  # not kept idle: its owner is gone
    assert maps.idle() == [b"other"] and len(maps) == 1
    _open(maps, b"new", 400, owner="pod-a")  # a new allocation of a restarted owner at that address
    assert maps.unpin(b"new") == [] and maps.idle() == [b"other", b"new"]


def test_unpinning_a_mapping_closed_meanwhile_closes_nothing():
    maps = IpcMappings(idle_bytes=0)
    _open(maps, b"x", 100)
    assert len(maps.unpin(b"x")) == 1
    assert maps.unpin(b"x") == [] and maps.unpin(b"never-opened") == [] and len(maps) == 0


def test_the_idle_byte_count_follows_every_way_in_and_out():
    """Reuse, a second open, a lost owner and the bounds each take a mapping out of the idle
    set; after many of each, the byte bound still closes exactly what is past it."""
    maps = IpcMappings(idle_bytes=2 * MIB, idle_count=100)
    for round_ in range(50):
        if round_ == 0:
            _open(maps, b"kept", 100)
        else:
            assert maps.pin(b"kept", "e") == 100  # out of the idle set by reuse
        assert maps.opened(b"kept", 101, MIB, "pod-a", "e") == (100, 101)  # a second open
        assert maps.unpin(b"kept") == []  # one copy still pins it
        _open(maps, b"big", 300, nbytes=4 * MIB)
        assert [m.pointer for m in maps.unpin(b"big")] == [300]  # by the byte bound, at once
        assert maps.unpin(b"kept") == [] and maps.idle() == [b"kept"]
        _open(maps, b"lost", 200, owner="pod-b")
        assert maps.unpin(b"lost") == [] and maps.idle() == [b"kept", b"lost"]  # 2 MiB: kept
        assert [m.pointer for m in maps.drop_owner("pod-b")] == [200]  # by a lost owner
        assert maps.idle() == [b"kept"]
    _open(maps, b"one-more", 400)
    assert maps.unpin(b"one-more") == []  # 2 MiB idle: at the bound, both kept
    _open(maps, b"past", 500)
    assert [m.pointer for m in maps.unpin(b"past")] == [100]  # 3 MiB: the oldest goes
    assert maps.idle() == [b"one-more", b"past"]
