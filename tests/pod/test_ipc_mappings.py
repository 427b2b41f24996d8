"""pod/ipc_mappings.py: a mapping of a peer allocation closes when the last job using it goes."""

from pod.ipc_mappings import IpcMappings


def test_forgetting_one_job_keeps_the_mappings_another_job_uses():
    maps = IpcMappings()
    assert maps.use(b"x", "a") is None  # not open yet: the caller opens it
    assert maps.opened(b"x", 100, "a") is None
    assert maps.opened(b"y", 200, "a") is None
    assert maps.use(b"x", "b") == 100  # job b fetches from the same allocation
    closed = maps.forget("a")
    assert [m.pointer for m in closed] == [200]  # y: only a used it
    assert maps.pointer(b"x") == 100 and len(maps) == 1
    assert [m.pointer for m in maps.forget("b")] == [100] and len(maps) == 0


def test_a_mapping_opened_twice_keeps_the_first_and_hands_back_the_second():
    maps = IpcMappings()
    assert maps.opened(b"x", 100, "a") is None
    assert maps.opened(b"x", 101, "b") == 101  # another thread's open: the caller closes 101
    assert maps.pointer(b"x") == 100
    assert maps.forget("a") == []  # b counted as a user by its open
    assert [m.pointer for m in maps.forget("b")] == [100]


def test_a_closed_mapping_carries_its_last_copy_for_the_caller_to_wait_for():
    maps = IpcMappings()
    maps.opened(b"x", 100, "a")
    maps.copied(b"x", "event-1")
    maps.copied(b"x", "event-2")
    (mapping,) = maps.forget("a")
    assert mapping.last_copy == "event-2"


def test_forgetting_a_job_that_used_nothing_closes_nothing():
    maps = IpcMappings()
    maps.opened(b"x", 100, "a")
    assert maps.forget("never-ran") == [] and len(maps) == 1
