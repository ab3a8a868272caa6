"""Shared memory through which a worker process hands big arrays to its parent with one copy
(:class:`SharedSlots`)."""

import mmap
import struct
import weakref

import numpy as np

__all__ = ['SharedSlots', 'reserve_shared_slots']

_PLACE = struct.Struct('<cIQ')  # where a data frame travels: kind, slot number, bytes used
_IN_SLOT = b's'
_IN_MESSAGE = _PLACE.pack(b'm', 0, 0)


class SharedSlots(object):
    """Shared-memory slots through which one worker hands big arrays to the parent with a
    single copy (a pipe costs two copies through the kernel, and page faults).

    Made by the parent before the fork (anonymous shared mappings, inherited by the worker):
    ``count`` slots of ``size`` bytes and one state byte per slot (0: free). The worker copies
    an array of ``min_bytes`` or more into a free slot and sends only the slot's number; the
    parent hands out arrays viewing the slot and frees the slot when the last of them is
    garbage-collected. Without a free slot (the consumer keeps arrays), or for an array too
    small or too big, the worker sends the array through the pipe instead. Pages are
    allocated as slots are first used. ``count`` 0: no slot, everything through the pipe.
    """

    def __init__(self, count, size, min_bytes):
        self.count, self.size, self.min_bytes = count, size, min_bytes
        self.memory = mmap.mmap(-1, count * size) if count else None  # MAP_SHARED | MAP_ANONYMOUS
        self.states = mmap.mmap(-1, count) if count else None

    # --- in the worker
    def lend(self, frames):
        """Copy each frame of ``frames`` (memoryviews) that fits into a free slot:
        ``(places, rest)``. ``places`` tells, frame after frame, whether it went into a slot
        (which one, how many bytes) or is among ``rest``, the frames to send in the message."""
        places, rest = [], []
        for frame in frames:
            slot = self._put(frame)
            if slot is None:
                places.append(_IN_MESSAGE)
                rest.append(frame)
            else:
                places.append(_PLACE.pack(_IN_SLOT, slot, frame.nbytes))
        return b''.join(places), rest

    def _put(self, frame):
        """Copy ``frame`` into a free slot: the slot's number, or None."""
        if not self.count or not self.min_bytes <= frame.nbytes <= self.size:
            return None
        slot = self.states.find(b'\0')
        if slot < 0:
            return None
        self.states[slot] = 1
        np.copyto(np.frombuffer(self.memory, np.uint8, frame.nbytes, slot * self.size),
                  np.frombuffer(frame, np.uint8))
        return slot

    # --- in the parent
    def collect(self, places, frames):
        """The frames :meth:`lend` was given, in order, from ``places`` and the ``frames``
        received: an array viewing its slot for each frame that went through one (the slot
        is freed when the last view of it is garbage-collected)."""
        if not self.count:
            return frames
        received, out = iter(frames), []
        for offset in range(0, len(places), _PLACE.size):
            kind, slot, nbytes = _PLACE.unpack_from(places, offset)
            if kind != _IN_SLOT:
                out.append(next(received))
                continue
            arr = np.frombuffer(self.memory, np.uint8, nbytes, slot * self.size)
            # views of arr (and loads_frames' arrays, through memoryviews) keep arr alive
            weakref.finalize(arr, _free_slot, self.states, slot)
            out.append(arr)
        return out


def _free_slot(states, slot):
    states[slot] = 0


def reserve_shared_slots(owner, num_proc, count, size, min_bytes):
    """The :class:`SharedSlots` of each of ``num_proc`` workers of the DataFlow class
    ``owner``; a MemoryError saying what to lower when the address space is short."""
    slots = []
    for k in range(num_proc):
        try:
            slots.append(SharedSlots(max(0, count), size, min_bytes))
        except OSError as err:  # mmap: ENOMEM, e.g. under a limit of the address space (ulimit -v)
            each = count * size
            raise MemoryError(
                "{name}: cannot reserve the shared memory of worker #{k} ({err}). Each of the {n} "
                "workers reserves shared_memory_slots x shared_memory_slot_bytes = {slots} x {size} "
                "bytes ({each:g} MiB; {total:g} MiB in all) of address space. Lower "
                "{name}.shared_memory_slots (0: arrays go through the pipe) or "
                "{name}.shared_memory_slot_bytes, or use fewer workers.".format(
                    name=owner, k=k, err=err, n=num_proc, slots=count, size=size,
                    each=each / 2 ** 20, total=each * num_proc / 2 ** 20)) from err
    return slots
