"""The labeling queue ranked by value: the ranking rule, the recompute with real checkpoints on stored
frames, "Label next" and the queue page, and labels made from the queue being ordinary human labels."""

from __future__ import annotations

import numpy as np
import pytest

from training.queue.ranking import Candidate, rank, value_of

from .conftest import seed_episodes


def test_value_prefers_uncertain_and_disagreeing_frames_and_says_why():
    sure, _ = value_of(Candidate("e", 0, 0.02))
    unsure, reasons = value_of(Candidate("e", 1, 0.5))
    assert unsure > sure and reasons == ["uncertain (p=0.50)"]
    fooled, reasons = value_of(Candidate("e", 2, 0.95, env_success=False))
    assert fooled > unsure and "env says fail" in reasons[0]
    split, reasons = value_of(Candidate("e", 3, 0.9, other_probability=0.1))
    assert split > sure and "models disagree" in reasons[-1]
    assert value_of(Candidate("e", 4, 0.001))[1] == ["the model is sure (p=0.00); no unlabeled frame is less sure"]


def test_a_coverage_pick_of_a_frame_the_model_is_sure_of_gives_only_the_coverage_reason():
    sure = [Candidate("a", i, 0.001) for i in range(4)]
    picked = rank(sure, limit=4, explore_share=1.0, seed=0)
    assert all(r.reasons == ["exploration: random pick"] for r in picked)


def test_rank_spreads_across_episodes():
    crowded = [Candidate("a", i, 0.5) for i in range(5)]
    other = [Candidate("b", 0, 0.4), Candidate("c", 0, 0.35)]
    top = rank([*crowded, *other], limit=3, explore_share=0)
    assert [r.candidate.episode for r in top] == ["a", "b", "c"]
    assert len(rank([*crowded, *other], limit=100)) == 7
    with pytest.raises(ValueError):
        rank(crowded, episode_decay=0)


def test_rank_spreads_over_each_episode_so_neighbouring_frames_come_last():
    # one episode whose most uncertain frames sit side by side (steps 10-13) and a far, less uncertain one
    frames = [Candidate("a", 10, 0.5), Candidate("a", 11, 0.49), Candidate("a", 12, 0.48), Candidate("a", 13, 0.47)]
    far = Candidate("a", 30, 0.3)
    spread = [r.candidate.step for r in rank([*frames, far], limit=5, neighbour_steps=3, explore_share=0)]
    assert spread == [10, 30, 11, 12, 13]  # the neighbours of step 10 wait until step 30 is taken
    assert spread[2:] == sorted(spread[2:])  # the waiting ones follow in value order
    plain = [r.candidate.step for r in rank([*frames, far], limit=5, neighbour_steps=0, explore_share=0)]
    assert plain == [10, 11, 12, 13, 30]  # 0: best first, as before
    # frames further apart than neighbour_steps are not held back
    apart = [Candidate("a", 0, 0.5), Candidate("a", 4, 0.45), Candidate("a", 20, 0.2)]
    assert [r.candidate.step for r in rank(apart, neighbour_steps=3, explore_share=0)] == [0, 4, 20]
    with pytest.raises(ValueError):
        rank(frames, neighbour_steps=-1)


def embedded(episode: str, step: int, p: float, direction: list[float]) -> Candidate:
    return Candidate(episode, step, p, features=np.asarray(direction, dtype=np.float32))


def test_farthest_coverage_picks_alternate_with_value_picks_and_go_where_nothing_is_labeled():
    # the uncertain frames all look like the labeled ones; two confident frames look like nothing labeled
    known = [embedded(e, s, 0.5 - s / 100, [1.0, 0.05 * s, 0.0]) for e in "ab" for s in range(3)]
    new_kind = embedded("c", 0, 0.02, [0.0, 1.0, 0.0])
    other_kind = embedded("d", 0, 0.03, [0.0, 0.0, 5.0])  # scale does not matter: directions are compared
    labeled = np.asarray([[2.0, 0.0, 0.0]])
    frames = [*known, new_kind, other_kind]
    top = rank(frames, limit=4, explore_share=0.5, labeled_features=labeled, coverage="farthest")
    assert [r.candidate.episode for r in top][1::2] in (["c", "d"], ["d", "c"])  # every other item covers
    assert all(r.reasons[0].startswith("coverage: least like the labeled") for r in top[1::2])
    assert all(r.candidate.probability >= 0.45 for r in top[0::2])  # the others still by value
    only_value = rank(frames, limit=4, explore_share=0, labeled_features=labeled)
    assert {r.candidate.episode for r in only_value} <= {"a", "b"}
    everything = rank(frames, limit=100, explore_share=1.0, labeled_features=labeled, coverage="farthest")
    assert len(everything) == 8 and len({(r.candidate.episode, r.candidate.step) for r in everything}) == 8
    # a coverage pick counts the frames queued before it: after c and d, the next is the farthest rest
    assert {r.candidate.episode for r in everything[:2]} == {"c", "d"}
    with pytest.raises(ValueError):
        rank(known, explore_share=1.5)
    with pytest.raises(ValueError):
        rank(known, coverage="nearest")


def test_typical_coverage_picks_the_centre_of_each_unlabeled_group_largest_first():
    # uncertain frames that look exactly like the labeled one, a group of three alike confident frames
    # (b, centred on step 10) and one lone frame (c): the groups with no labeled frame are covered
    known = [embedded("a", s, 0.5 - s / 100, [1.0, 0.0, 0.0]) for s in range(4)]
    group = [embedded("b", 10 + k, 0.02, [0.0, 1.0, z]) for k, z in enumerate([0.0, 0.3, -0.3])]
    lone = embedded("c", 20, 0.03, [0.0, 0.0, 1.0])
    labeled = np.asarray([[3.0, 0.0, 0.0]])
    top = rank([*known, *group, lone], limit=4, explore_share=0.5, labeled_features=labeled)
    assert [(r.candidate.episode, r.candidate.step) for r in top] == [("a", 0), ("b", 10), ("a", 1), ("c", 20)]
    assert top[1].reasons[0] == "coverage: typical of 3 similar frames, none of them labeled"
    assert top[3].reasons[0] == "coverage: typical of 1 similar frames, none of them labeled"
    # once every group holds a labeled frame, the coverage turns go back to value picks
    covered = np.asarray([[3.0, 0.0, 0.0], [0.0, 0.0, 1.0], *[[0.0, 1.0, z] for z in (0.0, 0.3, -0.3)]])
    top = rank([*known, *group, lone], limit=4, explore_share=0.5, labeled_features=covered)
    assert all(r.candidate.episode == "a" for r in top) and not any("coverage" in r.reasons[0] for r in top)


def test_without_embeddings_the_exploration_share_is_a_seeded_random_draw():
    frames = [Candidate(e, s, 0.5 - s / 200, None) for e in "abcdefgh" for s in range(0, 40, 5)]
    first = rank(frames, limit=20, explore_share=0.25, seed=1)
    assert [r.reasons[0] == "exploration: random pick" for r in first] == [n % 4 == 3 for n in range(20)]
    again = rank(frames, limit=20, explore_share=0.25, seed=1)
    assert [(r.candidate.episode, r.candidate.step) for r in again] == [
        (r.candidate.episode, r.candidate.step) for r in first
    ]
    other = rank(frames, limit=20, explore_share=0.25, seed=2)
    assert [r.candidate for r in other] != [r.candidate for r in first]
    drawn = [r.candidate for r in first[3::4]]
    by_value = [r.candidate for r in rank(frames, limit=100, explore_share=0) if r.candidate not in drawn]
    assert [r.candidate for n, r in enumerate(first) if n % 4 != 3] == by_value[:15]  # value order kept


@pytest.mark.django_db
def test_recompute_queues_unlabeled_frames_and_label_next_follows_human_labels(project, user_client, settings):
    from labeling.labels.services import Actor, frame_labels_set
    from labeling.models import FrameLabel
    from tests.inference.conftest import make_trained_model
    from training.models import LabelQueueItem
    from training.queue.services import label_queue_items, label_queue_next, label_queue_recompute

    episodes = seed_episodes(project, episodes=3, steps=5, windows=False)
    FrameLabel.objects.filter(episode__in=episodes[:2]).delete()  # 10 unlabeled frames in two episodes
    assert label_queue_recompute(project=project) == 0  # no model yet

    first = make_trained_model(project, seed=1, bias=0.0)
    assert label_queue_recompute(project=project) == 10
    # by default every other item is a coverage pick while groups of frames with no labeled one are left
    covering = [i.reasons[0].startswith("coverage: typical") for i in label_queue_items(project=project)]
    assert not any(covering[0::2]) and sum(covering[1::2]) >= 3, covering
    settings.LABEL_QUEUE_EXPLORE_PERCENT = 0  # value only: the spread across episodes shows
    assert label_queue_recompute(project=project) == 10
    items = list(label_queue_items(project=project))
    assert {i.step.episode_id for i in items} == {episodes[0].pk, episodes[1].pk}
    assert [i.rank for i in items] == list(range(10)) and all(i.reasons for i in items)
    assert items[0].step.episode_id != items[1].step.episode_id  # spread across episodes

    response = user_client.get(f"/projects/{project.pk}/label-next")
    top = items[0]
    assert response.status_code == 302
    assert response["Location"] == f"/episodes/{top.step.episode.uuid}/label/?step={top.step.index}&queue={project.pk}"

    # a label made from the queue is an ordinary human label, and the next frame comes up
    frame_labels_set(episode=top.step.episode, items=[(top.step.index, "success")], actor=Actor.of(None))
    assert FrameLabel.objects.get(step=top.step).source == "human"
    assert label_queue_next(project=project).pk == items[1].pk

    # retraining: a second, different model; both are compared and the ranking changes
    make_trained_model(project, seed=2, bias=4.0)
    assert label_queue_recompute(project=project) == 9
    again = list(LabelQueueItem.objects.filter(project=project))
    assert top.step_id not in {i.step_id for i in again}
    assert any("models disagree" in r for i in again for r in i.reasons)
    assert {i.model_id for i in again} != {first.pk}

    page = user_client.get(f"/projects/{project.pk}/label-queue")
    assert page.status_code == 200 and b"models disagree" in page.content
    assert b"Label next" in user_client.get(f"/projects/{project.pk}/").content


@pytest.mark.django_db
def test_retrain_after_n_labels_and_redeploy_only_a_better_model(project):
    from inference.services import deployment_create
    from labeling.models import FrameLabel
    from tests.inference.conftest import make_trained_model
    from training.models import RetrainPolicy, TrainingJob
    from training.queue.retrain import after_training, retrain_check

    episodes = seed_episodes(project, episodes=3, steps=5, windows=False)
    FrameLabel.objects.filter(project=project).update(value="fail")  # one success per episode: on any
    FrameLabel.objects.filter(project=project, step__index=4).update(value="success")  # split, fail wins
    labels = list(FrameLabel.objects.filter(episode=episodes[2]))
    FrameLabel.objects.filter(pk__in=[x.pk for x in labels]).delete()
    all_success = make_trained_model(project, seed=1, bias=8.0)  # says success everywhere
    deployment = deployment_create(name="auto-target", trained_model=all_success)
    policy = RetrainPolicy.objects.create(
        project=project, retrain_after_labels=5, redeploy=deployment.name, labels_at_last_job=10
    )
    assert retrain_check(policy=policy) is None  # no new labels since the last job
    FrameLabel.objects.bulk_create(labels)  # 5 new human labels
    job = retrain_check(policy=policy)
    assert job is not None and job.snapshot.status == "ready" and job.status == "queued"
    policy.refresh_from_db()
    assert policy.labels_at_last_job == 15 and policy.eval_snapshot_id == job.snapshot_id
    assert retrain_check(policy=policy) is None  # the job is still queued: no second one

    # the job's model says fail everywhere: better than all-success on this split, so it is deployed
    TrainingJob.objects.filter(pk=job.pk).update(status="succeeded")
    better = make_trained_model(project, seed=2, bias=-8.0)
    better.job = job
    better.save()
    after_training(job_id=job.pk)
    deployment.refresh_from_db()
    policy.refresh_from_db()
    assert deployment.trained_model_id == better.pk and policy.last_comparison["redeployed"], policy.last_comparison
    assert policy.last_comparison["new_accuracy"] > policy.last_comparison["old_accuracy"]
    assert f"a={all_success.pk}&b={better.pk}" in policy.last_comparison["compare_url"]
    switched = deployment.events.get(action="switched")  # the deployment's history names the policy
    assert switched.actor == f"retrain policy {policy.pk}" and deployment.version_label == "v2"

    worse = make_trained_model(project, seed=3, bias=8.0)
    worse.job = job
    worse.save()
    after_training(job_id=job.pk)
    deployment.refresh_from_db()
    policy.refresh_from_db()
    assert deployment.trained_model_id == better.pk and not policy.last_comparison["redeployed"]


@pytest.mark.django_db
def test_the_retrain_policy_may_only_redeploy_the_projects_own_deployments(project, user_client, member_client):
    from inference.services import deployment_create
    from projects.models import Project
    from tests.inference.conftest import make_trained_model
    from training.models import RetrainPolicy

    other = Project.objects.create(name="Someone else's", task_description="Stack.")  # alice is not a member
    theirs = deployment_create(name="their-target", trained_model=make_trained_model(other, seed=4))
    ours = deployment_create(name="our-target", trained_model=make_trained_model(project, seed=5))
    url = f"/projects/{project.pk}/label-queue"

    refused = user_client.post(url, {"retrain_after_labels": 5, "redeploy": theirs.name})
    assert refused.status_code == 200 and "this project has no deployment named" in refused.content.decode()
    assert not RetrainPolicy.objects.exists()
    assert member_client(project, "reviewer").post(url, {"retrain_after_labels": 5}).status_code == 403
    assert user_client.post(url, {"retrain_after_labels": 5, "redeploy": ours.name}).status_code == 302
    assert RetrainPolicy.objects.get(project=project).redeploy == ours.name


@pytest.mark.django_db
def test_an_empty_queue_says_why_it_is_empty(project, user_client):
    from labeling.labels.services import Actor, frame_labels_set
    from labeling.models import FrameLabel, Step
    from tests.inference.conftest import make_trained_model

    def empty_text() -> str:
        page = user_client.get(f"/projects/{project.pk}/label-queue").content.decode()
        return page.split('id="queue-empty">')[1].split("</div>")[0]

    assert "no episodes" in empty_text()
    episodes = seed_episodes(project, episodes=1, steps=3, windows=False)
    FrameLabel.objects.filter(episode__in=episodes).delete()
    assert "has none. Train one" in empty_text()
    make_trained_model(project, seed=1, bias=0.0)
    assert "recompute the queue" in empty_text()
    steps = Step.objects.filter(episode=episodes[0]).order_by("index")
    frame_labels_set(episode=episodes[0], items=[(s.index, "fail") for s in steps], actor=Actor.of(None))
    assert "Every frame of this project has a human label" in empty_text()
    response = user_client.get(f"/projects/{project.pk}/label-next", follow=True)
    assert b"Every frame of this project has a human label" in response.content
