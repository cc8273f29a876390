"""The inference worker's mappings of same-host segments (inference/shm/frames.py), with real memfds, no server."""

from __future__ import annotations

import numpy as np

from inference.shm.frames import SegmentMaps, ShmDescriptor, segment_read
from reward_client.shm import SharedFrames


def test_a_mapping_is_reused_while_the_client_holds_its_segment_and_dropped_once_it_closes_it():
    frames = SharedFrames("0" * 16)
    batch = np.random.default_rng(0).integers(0, 256, size=(5, 4, 6, 3), dtype=np.uint8)
    descriptor = ShmDescriptor.from_header(frames.write(batch))
    maps = SegmentMaps(capacity=2)
    np.testing.assert_array_equal(maps.array(descriptor), batch)
    batch[:] = 9  # the next batch, written in place: the kept mapping sees it
    frames.write(batch)
    view = maps.array(descriptor)
    np.testing.assert_array_equal(view, batch)
    assert len(maps) == 1 and not view.flags.writeable
    np.testing.assert_array_equal(segment_read(descriptor, [4, 0, 1]), batch[[4, 0, 1]])
    assert maps.sweep() == 0
    frames.close()
    assert maps.sweep() == 1 and len(maps) == 0
    np.testing.assert_array_equal(view, 9)  # a request's array outlives the drop (unmapped when it goes)


def test_at_most_capacity_mappings_are_kept():
    clients = [SharedFrames("0" * 16) for _ in range(3)]
    maps = SegmentMaps(capacity=2)
    for i, client in enumerate(clients):
        array = maps.array(ShmDescriptor.from_header(client.write(np.full((1, 2, 2, 3), i, np.uint8))))
        assert int(array[0, 0, 0, 0]) == i
    assert len(maps) == 2
    for client in clients:
        client.close()
