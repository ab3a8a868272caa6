"""dataflow.shared_slots: big arrays through shared memory, one copy, the slot freed with the
last array that views it."""

import gc
import mmap

import numpy as np
import pytest

from tensorpack_lite.dataflow.shared_slots import SharedSlots, reserve_shared_slots


def frames(*sizes):
    return [memoryview(np.arange(size, dtype=np.uint8) % 251) for size in sizes]


def test_big_frames_go_through_free_slots_the_others_in_the_message():
    slots = SharedSlots(count=2, size=1 << 16, min_bytes=1024)
    sent = frames(100, 4096, 1 << 17, 8192, 2048)   # small, slot, too big, slot, no free slot left
    places, rest = slots.lend(sent)
    assert [f.nbytes for f in rest] == [100, 1 << 17, 2048]
    received = slots.collect(places, rest)
    assert [bytes(r) for r in received] == [bytes(f) for f in sent]
    assert bytes(slots.states) == b'\1\1'
    del received
    gc.collect()
    assert bytes(slots.states) == b'\0\0'   # the arrays are gone: the slots are free again


def test_a_slot_stays_taken_while_a_view_of_its_array_lives():
    slots = SharedSlots(count=1, size=1 << 16, min_bytes=1024)
    places, rest = slots.lend(frames(4096))
    array = slots.collect(places, rest)[0]
    view = array[10:20]
    del array
    gc.collect()
    assert bytes(slots.states) == b'\1' and view.tolist() == list(range(10, 20))
    del view
    gc.collect()
    assert bytes(slots.states) == b'\0'


def test_without_slots_everything_travels_in_the_message():
    slots = SharedSlots(count=0, size=1 << 16, min_bytes=1024)
    sent = frames(4096)
    places, rest = slots.lend(sent)
    assert rest == sent and slots.collect(places, rest) == sent


def test_reserving_too_much_says_what_to_lower(monkeypatch):
    def no_memory(*args):
        raise OSError(12, 'Cannot allocate memory')
    monkeypatch.setattr(mmap, 'mmap', no_memory)
    with pytest.raises(MemoryError) as err:
        reserve_shared_slots('Runner', num_proc=4, count=8, size=1 << 20, min_bytes=1024)
    message = str(err.value)
    assert 'Runner: cannot reserve the shared memory of worker #0' in message
    assert '8 x 1048576 bytes (8 MiB; 32 MiB in all)' in message
    assert 'Lower Runner.shared_memory_slots' in message
