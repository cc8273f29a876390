"""Out-of-distribution statistics of a ResNet reward model (training.resnet.ood): fitted after training on the
seeded frames (the generator tests/training/conftest.py seed_episodes draws from), served by the scorer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.kit.family_parts import ModelSpec
from training.resnet.checkpoint import load_checkpoint
from training.resnet.config import ResNetConfig
from training.resnet.ood import LAYERS, OOD_FILE, ood_fit, ood_fit_folder, ood_load, ood_scores
from training.resnet.ood_panel import read_ood_panel
from training.resnet.scorer import ResNetScorer
from training.resnet.train import train_reward_model
from training.synthetic import make_scene

CONFIG = {
    "hidden_dim": 32,
    "image_size": [3, 32, 32],
    "lr": 3e-4,
    "warmup_steps": 0,
    "batch_size": 8,
    "epochs": 2,
    "patience": 0,
    "seed": 0,
    "num_threads": 2,
    "pretrained": False,
}


def frames(count: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    labels = [int(i % 3 == 0) for i in range(count)]
    return np.stack([make_scene(bool(label), 32, rng) for label in labels]), labels


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ood")
    train_x, train_y = frames(96, 0)
    val_x, val_y = frames(60, 1)
    outcome = train_reward_model(ResNetConfig.from_dict(CONFIG), train_x, train_y, val_x, val_y, out_dir=folder)
    weights = (outcome.best_folder / "model.safetensors").read_bytes()
    model, _ = load_checkpoint(outcome.best_folder)
    stats = ood_fit_folder(outcome.best_folder, model, train_x, train_y, val_x)
    assert (outcome.best_folder / "model.safetensors").read_bytes() == weights  # RLinf's file is untouched
    # frames drawn one by one have no episodes: the validation frames alone calibrate (tests/training/
    # test_training_job.py runs the cross-fitted rule on a snapshot's episodes, through the runner)
    assert stats.calibration == "validation"
    return outcome.best_folder, stats


@pytest.mark.parametrize("count", [50, 107, 159, 400])
def test_at_most_one_percent_of_the_validation_frames_lie_above_the_threshold(count):
    """The threshold is one of the validation scores (their 99th percentile, rounded up): the tour's 159 frames
    give 1 above it (0.6%), not the 2 (1.3%) of a threshold interpolated between two scores."""
    rng = np.random.default_rng(count)
    train = {layer: rng.normal(size=(64, 4)) for layer in LAYERS}
    val = {layer: rng.normal(size=(count, 4)) for layer in LAYERS}
    stats = ood_fit(train, np.arange(64) % 2, val)
    assert stats.val_flagged <= 0.01
    assert round(stats.val_flagged * count) == int(0.01 * (count - 1))


def episodic(rng: np.random.Generator, episodes: int, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """Features of `episodes` episodes: each its own offset (a new cube position), its frames scattered around
    it, so frames of one episode are alike and a new episode lies where no frame of the others did."""
    offsets = rng.normal(size=(episodes, 4))
    features = np.concatenate([offset + rng.normal(scale=0.5, size=(frames, 4)) for offset in offsets])
    return features, np.repeat(np.arange(episodes), frames)


def test_cross_fitting_by_episode_flags_few_frames_of_unseen_episodes_where_two_validation_episodes_do_not():
    """The tour's failure in small: a threshold set on 2 validation episodes flagged 17-31% of new demo
    episodes' frames. Out-of-fold scores of the training episodes calibrate it on 32 episodes, not 2; frames far
    from every episode stay flagged."""
    rates: dict[str, list[float]] = {"validation": [], "episodes": []}
    for seed in range(8):
        rng = np.random.default_rng(seed)
        train, episodes = episodic(rng, 30, 10)
        val, _ = episodic(rng, 2, 10)
        unseen, _ = episodic(rng, 100, 10)
        labels = np.arange(len(train)) % 2
        for rule, groups in (("validation", None), ("episodes", episodes)):
            stats = ood_fit({k: train for k in LAYERS}, labels, {k: val for k in LAYERS}, train_groups=groups)
            assert stats.calibration.startswith(rule)
            scores = ood_scores(stats, {k: torch.from_numpy(unseen).float() for k in LAYERS})
            rates[rule].append(float((scores > stats.threshold).float().mean()))
            far = ood_scores(stats, {k: torch.full((5, 4), 6.0) for k in LAYERS})
            assert bool((far > stats.threshold).all()), rule
    assert np.mean(rates["episodes"]) <= 0.03, rates
    assert np.mean(rates["validation"]) >= 3 * np.mean(rates["episodes"]), rates
    assert max(rates["validation"]) >= 0.1 and max(rates["episodes"]) <= 0.05, rates


def test_episode_labels_must_match_the_training_frames():
    rng = np.random.default_rng(0)
    train = {k: rng.normal(size=(20, 4)) for k in LAYERS}
    with pytest.raises(ValueError, match="19 episode labels for 20 training frames"):
        ood_fit(train, np.arange(20) % 2, train, train_groups=np.arange(19))
    one_episode = ood_fit(train, np.arange(20) % 2, train, train_groups=np.zeros(20))
    assert one_episode.calibration == "validation"  # nothing to cross-fit: the validation frames alone


def test_blank_constant_and_noise_frames_are_flagged_and_few_validation_frames(fitted):
    folder, stats = fitted
    assert stats.val_flagged <= 0.05
    panel = read_ood_panel(folder)
    assert panel is not None and panel["val_flagged"] == stats.val_flagged
    assert panel["calibration"] == stats.calibration == ood_load(folder).calibration
    flagged = {row["probe"]: row["flagged"] for row in panel["probes"]}
    assert flagged["black"] == flagged["white"] == flagged["constant grey"] == 1.0
    assert flagged["uniform noise"] == 1.0
    assert all(0.0 <= row["probability"] <= 1.0 for row in panel["probes"])


def test_the_scorer_flags_in_the_same_pass_and_an_old_model_answers_bare_probabilities(fitted, tmp_path):
    folder, stats = fitted
    val_x, _ = frames(10, 2)
    probes = np.stack([np.zeros((32, 32, 3), np.uint8), np.full((32, 32, 3), 128, np.uint8)])
    noise = np.random.default_rng(3).integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
    items = ResNetScorer(ModelSpec(kind="resnet", folder=folder)).score(np.concatenate([probes, noise, val_x]))
    assert [item["ood"] for item in items[:4]] == [True] * 4
    assert sum(item["ood"] for item in items[4:]) <= 1
    assert all(item["ood_score"] > 1.0 for item in items[:4])
    assert ood_load(folder) is not None
    old = tmp_path / "old"
    old.mkdir()
    for name in ("model.safetensors", "config.json"):
        (old / name).write_bytes((folder / name).read_bytes())
    assert not (old / OOD_FILE).exists() and ood_load(old) is None
    bare = ResNetScorer(ModelSpec(kind="resnet", folder=old)).score(probes)
    assert bare == pytest.approx([item["probability"] for item in items[:2]], abs=1e-5)


def test_the_evaluation_page_panel_lists_each_probe_with_its_probability_and_flag(fitted, settings):
    from django.template.loader import render_to_string

    from training.models import TrainedModel

    folder, _ = fitted
    settings.MEDIA_ROOT = str(folder.parent)
    html = render_to_string(
        "training/_ood_panel.html", {"model": TrainedModel(kind="resnet", checkpoint_path=folder.name)}
    )
    assert 'id="ood-panel"' in html
    for probe in ("black", "constant grey", "uniform noise", "brightened x2.5"):
        assert f'data-probe="{probe}"' in html
    assert "<td>black</td><td>1</td>" in html and "<td>yes</td>" in html
    old = TrainedModel(kind="resnet", checkpoint_path="no-such-folder")
    assert render_to_string("training/_ood_panel.html", {"model": old}).strip() == ""
