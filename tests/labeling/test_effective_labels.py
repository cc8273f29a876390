"""The effective label of a step or window span: a human label over a proposal over a model label, and a
rejected proposal never counts (labeling/labels/selectors.py; snapshots, the queue and retraining read these)."""

from __future__ import annotations

import pytest

from labeling.labels.selectors import (
    effective_frame_labels,
    effective_window_labels,
    human_frame_label_count,
    human_labeled_steps,
)
from labeling.models import Episode, FrameLabel, LabelSource, ProposalStatus, Step, WindowLabel

ALL = [LabelSource.HUMAN, LabelSource.PROPOSAL, LabelSource.MODEL]


@pytest.fixture
def steps(project):
    episode = Episode.objects.create(project=project, num_steps=4)
    return [Step.objects.create(episode=episode, index=i) for i in range(4)]


def _frame(step, source, value, status=ProposalStatus.OPEN):
    return FrameLabel.objects.create(
        project=step.episode.project, episode=step.episode, step=step, source=source, value=value, status=status
    )


def test_human_beats_proposal_beats_model_and_rejected_never_counts(project, steps):
    s0, s1, s2, s3 = steps
    _frame(s0, LabelSource.MODEL, "fail")
    _frame(s0, LabelSource.PROPOSAL, "fail")
    _frame(s0, LabelSource.HUMAN, "success")
    _frame(s1, LabelSource.MODEL, "success")
    _frame(s1, LabelSource.PROPOSAL, "fail")
    _frame(s2, LabelSource.MODEL, "success")
    _frame(s2, LabelSource.PROPOSAL, "fail", status=ProposalStatus.REJECTED)
    _frame(s3, LabelSource.PROPOSAL, "success", status=ProposalStatus.REJECTED)

    best = effective_frame_labels(project=project, sources=ALL)
    assert {step_id: (row["source"], row["value"]) for step_id, row in best.items()} == {
        s0.pk: ("human", "success"),
        s1.pk: ("proposal", "fail"),
        s2.pk: ("model", "success"),
    }
    only_proposals = effective_frame_labels(project=project, sources=[LabelSource.PROPOSAL])
    assert {step_id: row["value"] for step_id, row in only_proposals.items()} == {s0.pk: "fail", s1.pk: "fail"}
    assert list(human_labeled_steps(project=project).values_list("step_id", flat=True)) == [s0.pk]
    assert human_frame_label_count(project=project) == 1


def test_window_spans_follow_the_same_rule(project, steps):
    episode = steps[0].episode

    def window(start, end, source, value, status=ProposalStatus.OPEN):
        WindowLabel.objects.create(
            project=project, episode=episode, start=start, end=end, source=source, value=value, status=status
        )

    window(0, 2, LabelSource.PROPOSAL, "negative")
    window(0, 2, LabelSource.HUMAN, "positive")
    window(1, 3, LabelSource.PROPOSAL, "unclear")
    window(0, 3, LabelSource.PROPOSAL, "positive", status=ProposalStatus.REJECTED)

    best = effective_window_labels(project=project, sources=ALL)
    assert {key: (row["source"], row["value"]) for key, row in best.items()} == {
        (episode.pk, 0, 2): ("human", "positive"),
        (episode.pk, 1, 3): ("proposal", "unclear"),
    }
