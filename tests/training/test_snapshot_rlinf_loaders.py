"""The frame split of snapshots without episodes (`split_by_frame`), checked by the documented rule's properties.

RLinf's own readers of our snapshots (RewardBinaryDataset, the trend SFT dataset) run in
tests/interop/test_rlinf_snapshot_loaders.py.
"""

from __future__ import annotations

import pytest

from training.datasets.rlinf_binary import BinaryOptions, FrameRef, split_by_frame


@pytest.mark.parametrize("ratio", [1.0, 2.0, 0.5])
def test_frame_split_follows_rlinfs_real_world_rule(ratio):
    """No released code to run: RLinf's rule lives in `examples/reward/realworld_collect_process_dataset.py`
    (`_save_pt`), and the 0.3.0 wheel ships no `examples/` (nor any split function), so this asserts the rule's
    documented properties, not a copy of it: the first `max(1, int(n * val_split))` of the shuffled frames go to
    validation before any thinning; the fail:success ratio applies to train only, keeping every train success
    frame and `int(successes * ratio)` fail frames; ratio 0 (or no train success) keeps train whole; the seed
    alone decides."""
    frames = [FrameRef(f"e{i // 10}", i, int(i % 3 == 0)) for i in range(40)]
    options = BinaryOptions(val_split=0.2, fail_success_ratio=ratio, seed=7)
    split = split_by_frame(frames, options)
    whole = split_by_frame(frames, BinaryOptions(val_split=0.2, fail_success_ratio=0.0, seed=7))

    assert len(split.val) == max(1, int(40 * 0.2)) == 8
    assert len(set(split.val) | set(split.train)) == len(split.val) + len(split.train)  # disjoint, no repeats
    assert set(whole.val) | set(whole.train) == set(frames) and len(whole.train) == 32  # ratio 0: nothing dropped
    assert split.val == whole.val  # validation is drawn before the ratio, whatever the ratio
    train_success = [f for f in whole.train if f.label == 1]
    train_fail = [f for f in whole.train if f.label == 0]
    assert [f for f in split.train if f.label == 1] != [] and {f for f in split.train if f.label == 1} == set(
        train_success
    )  # every train success frame stays
    kept_fail = [f for f in split.train if f.label == 0]
    assert len(kept_fail) == min(int(len(train_success) * ratio), len(train_fail))
    assert set(kept_fail) <= set(train_fail)
    assert split.val == split_by_frame(frames, options).val and split.train == split_by_frame(frames, options).train
    assert split_by_frame(frames, BinaryOptions(val_split=0.2, fail_success_ratio=ratio, seed=8)).val != split.val
    # train without a success frame is not thinned
    fails_only = [FrameRef("e", i, 0) for i in range(10)]
    assert len(split_by_frame(fails_only, options).train) == 10 - max(1, int(10 * 0.2))
