"""pod/ipc_mappings.py: a mapping of a peer allocation is opened once and kept across jobs; it
closes only when no running job uses it, and then only past the idle bounds, when its owner is
lost, with its last copy for the caller to wait for."""

from pod.ipc_mappings import IpcMappings

MIB = 1 << 20


def _open(maps: IpcMappings, handle: bytes, pointer: int, job: str, nbytes: int = MIB,
          owner: str = "pod-a") -> None:
    assert maps.use(handle, job) is None  # not open yet: the caller opens it
    assert maps.opened(handle, pointer, job, nbytes, owner) is None


def test_a_mapping_outlives_the_job_that_opened_it_and_serves_the_next_one():
    maps = IpcMappings()
    _open(maps, b"x", 100, "job-1")
    assert maps.forget("job-1") == []  # idle now, kept
    assert maps.idle() == [b"x"]
    assert maps.use(b"x", "job-2") == 100  # the next job's tile in the same owner allocation
    assert maps.idle() == [] and len(maps) == 1


def test_forgetting_one_job_never_closes_a_mapping_another_running_job_uses():
    maps = IpcMappings(idle_bytes=0, idle_count=0)  # no idle mapping kept at all
    _open(maps, b"x", 100, "a")
    _open(maps, b"y", 200, "a")
    assert maps.use(b"x", "b") == 100  # job b fetches from the same allocation
    assert [m.pointer for m in maps.forget("a")] == [200]  # y: idle past the bound; x: b runs
    assert maps.pointer(b"x") == 100 and len(maps) == 1
    assert [m.pointer for m in maps.forget("b")] == [100] and len(maps) == 0


def test_idle_mappings_past_the_byte_bound_close_least_recently_used_first():
    maps = IpcMappings(idle_bytes=3 * MIB, idle_count=100)
    for i, handle in enumerate((b"a", b"b", b"c")):
        _open(maps, handle, 100 + i, "job-1")
    assert maps.forget("job-1") == []  # 3 MiB idle: at the bound, all kept
    assert maps.use(b"a", "job-2") == 100  # a is in use again, and the most recently used
    _open(maps, b"d", 103, "job-2", nbytes=2 * MIB)
    closed = maps.forget("job-2")  # a (1 MiB) and d (2 MiB) go idle beside b and c: 5 MiB, 2 over
    assert [m.pointer for m in closed] == [101, 102]  # b, then c: the least recently used
    assert maps.idle() == [b"a", b"d"]


def test_idle_mappings_past_the_count_bound_close_too():
    maps = IpcMappings(idle_bytes=1 << 40, idle_count=2)
    for i, handle in enumerate((b"a", b"b", b"c")):
        _open(maps, handle, 100 + i, f"job-{i}")
        maps.forget(f"job-{i}")
    assert maps.idle() == [b"b", b"c"] and len(maps) == 2


def test_a_mapping_opened_twice_keeps_the_first_and_hands_back_the_second():
    maps = IpcMappings(idle_bytes=0)
    _open(maps, b"x", 100, "a")
    assert maps.opened(b"x", 101, "b", MIB, "pod-a") == 101  # another thread's open: closed by the caller
    assert maps.pointer(b"x") == 100
    assert maps.forget("a") == []  # b counted as a user by its open
    assert [m.pointer for m in maps.forget("b")] == [100]


def test_a_closing_mapping_carries_its_last_copy_for_the_caller_to_wait_for():
    maps = IpcMappings(idle_bytes=0)
    _open(maps, b"x", 100, "a")
    maps.copied(b"x", "event-1")
    maps.copied(b"x", "event-2")
    (mapping,) = maps.forget("a")
    assert mapping.last_copy == "event-2"


def test_a_lost_owner_closes_its_idle_mappings_now_and_its_busy_ones_when_their_jobs_end():
    maps = IpcMappings()
    _open(maps, b"idle", 100, "done", owner="pod-a")
    _open(maps, b"busy", 200, "running", owner="pod-a")
    _open(maps, b"other", 300, "done", owner="pod-b")
    maps.forget("done")
    assert [m.pointer for m in maps.drop_owner("pod-a")] == [100]  # busy: a copy may be running
    assert [m.pointer for m in maps.forget("running")] == [200]  # not kept idle: its owner is gone
    assert maps.idle() == [b"other"] and len(maps) == 1


def test_forgetting_a_job_that_used_nothing_closes_nothing():
    maps = IpcMappings()
    _open(maps, b"x", 100, "a")
    assert maps.forget("never-ran") == [] and len(maps) == 1 and maps.idle() == []


def test_the_idle_byte_count_follows_every_way_in_and_out():
    """Reuse, a second open, a lost owner and the bounds each take a mapping out of the idle
    set; after many of each, the byte bound still closes exactly what is past it."""
    maps = IpcMappings(idle_bytes=2 * MIB, idle_count=100)
    for round_ in range(50):
        job, again = f"job-{round_}", f"again-{round_}"
        if round_ == 0:
            _open(maps, b"kept", 100, job)
        else:
            assert maps.use(b"kept", job) == 100  # out of the idle set by reuse
        assert maps.opened(b"kept", 101, again, MIB, "pod-a") == 101  # by a second open
        _open(maps, b"big", 300, job, nbytes=4 * MIB)
        assert [m.pointer for m in maps.forget(job)] == [300]  # by the byte bound, at once
        _open(maps, b"lost", 200, again, owner="pod-b")
        assert maps.forget(again) == [] and maps.idle() == [b"kept", b"lost"]  # 2 MiB: kept
        assert [m.pointer for m in maps.drop_owner("pod-b")] == [200]  # by a lost owner
        assert maps.idle() == [b"kept"]
    _open(maps, b"one-more", 400, "last")
    assert maps.forget("last") == []  # 2 MiB idle: at the bound, both kept
    _open(maps, b"past", 500, "final")
    assert [m.pointer for m in maps.forget("final")] == [100]  # 3 MiB: the oldest goes
    assert maps.idle() == [b"one-more", b"past"]
