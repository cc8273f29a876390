"""The ResNet reward model, its config and checkpoints match RLinf's layout and preprocessing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torchvision
from torch.nn import functional as F

from training.resnet.checkpoint import load_checkpoint, save_checkpoint
from training.resnet.config import ConfigError, ResNetConfig
from training.resnet.model import (
    RewardResNet,
    clean_state_dict,
    input_frame,
    load_pretrained_backbone,
    predict_proba,
    predict_proba_and_features,
    uncropped,
)
from training.synthetic import make_scene, make_scenes


@pytest.fixture(autouse=True)
def one_thread():
    """The CI machine's cores are shared: one torch thread is faster than two contending ones."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def small_config(**overrides) -> ResNetConfig:
    return ResNetConfig(**{"hidden_dim": 32, "image_size": [3, 32, 32], **overrides})


def test_state_dict_keys_are_rlinfs_backbone_layout_with_no_extra_buffers():
    model = RewardResNet(small_config())
    keys = set(model.state_dict())
    reference = {
        f"backbone.{k}" for k in torchvision.models.resnet18(weights=None).state_dict() if not k.startswith("fc.")
    }
    head = {"backbone.fc.0.weight", "backbone.fc.0.bias", "backbone.fc.3.weight", "backbone.fc.3.bias"}
    assert keys == reference | head
    assert not {"mean", "std"} & keys


def test_head_without_hidden_dim_is_one_linear_layer_with_xavier_and_zero_bias():
    model = RewardResNet(small_config(hidden_dim=None))
    assert model.state_dict()["backbone.fc.weight"].shape == (1, 512)
    assert torch.count_nonzero(model.state_dict()["backbone.fc.bias"]) == 0
    wide = RewardResNet(small_config(arch="resnet50", hidden_dim=8))
    assert wide.state_dict()["backbone.fc.0.weight"].shape == (8, 2048)


def test_preprocessing_is_channels_last_div255_bilinear_resize_imagenet_normalize():
    model = RewardResNet(small_config()).eval()
    images = torch.from_numpy(make_scenes([True, False], 48, seed=1))
    x = images.permute(0, 3, 1, 2).float() / 255.0
    x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    assert torch.allclose(model.preprocess(images), (x - mean) / std, atol=1e-6)
    with torch.no_grad():
        nchw = model(x)  # float NCHW in [0, 1] takes the same path after the layout step
        assert torch.allclose(model(images), nchw, atol=1e-5)
        assert model(images).shape == (2,)


def test_checkpoint_reloads_with_identical_probabilities_and_rlinf_layout(tmp_path):
    config = small_config()
    model = RewardResNet(config).eval()
    images = make_scenes([True, False, True], 32, seed=2)
    expected = predict_proba(model, images)
    save_checkpoint(model, config, tmp_path, metrics={"val_acc": 0.5}, step=7, rlinf_layout=True)
    loaded, loaded_config = load_checkpoint(tmp_path)
    assert loaded_config == config
    assert not loaded.training
    np.testing.assert_array_equal(predict_proba(loaded, images), expected)
    assert json.loads((tmp_path / "config.json").read_text())["step"] == 7
    rlinf = torch.load(tmp_path / "actor/model_state_dict/full_weights.pt", weights_only=True)
    fresh = RewardResNet(config)
    fresh.load_state_dict(clean_state_dict({f"module.{k}": v for k, v in rlinf.items()} | {"mean": torch.zeros(3)}))


@pytest.mark.parametrize("crop", [[], [0.1, 0.2, 0.5, 0.6]], ids=["whole", "cropped"])
def test_frames_kept_at_the_models_input_size_score_as_the_whole_frames_do(crop):
    # background scoring keeps input_frame's small copy of each frame and scores it with the uncropped model
    model = RewardResNet(small_config(crop=crop)).eval()
    frames = np.random.default_rng(1).integers(0, 256, size=(3, 90, 120, 3), dtype=np.uint8)
    small = np.stack([input_frame(frame, model.config) for frame in frames])
    assert small.shape == (3, 32, 32, 3) and small.dtype == np.uint8
    whole = predict_proba(model, frames)
    np.testing.assert_allclose(predict_proba(uncropped(model), small), whole, atol=2e-3)
    assert model.config.crop == [] and small_config(crop=crop).crop == crop  # only that model changed


def test_features_are_what_the_head_sees_and_probabilities_match_predict_proba():
    model = RewardResNet(small_config()).eval()
    images = np.random.default_rng(0).integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
    probabilities, features = predict_proba_and_features(model, images, batch_size=2)
    np.testing.assert_allclose(probabilities, predict_proba(model, images), atol=1e-6)
    assert features.shape == (5, model.config.feature_dim) and features.dtype == np.float32
    with torch.inference_mode():  # the head applied to the features gives the model's logits
        logits = model.backbone.fc(torch.from_numpy(features)).squeeze(-1)
    np.testing.assert_allclose(torch.sigmoid(logits).numpy(), probabilities, atol=1e-5)
    assert not model.backbone.fc._forward_pre_hooks  # the hook is gone afterwards
    empty_probabilities, empty_features = predict_proba_and_features(model, images[:0])
    assert empty_probabilities.shape == (0,) and empty_features.shape == (0, model.config.feature_dim)


def test_pretrained_backbone_loads_from_a_local_torchvision_file(tmp_path):
    reference = torchvision.models.resnet18(weights=None)
    torch.save(reference.state_dict(), tmp_path / "resnet18.pth")
    model = RewardResNet(small_config(pretrained=True, pretrained_path=str(tmp_path / "resnet18.pth")))
    missing = load_pretrained_backbone(model, str(tmp_path / "resnet18.pth"))
    assert all(k.startswith("fc.") for k in missing)
    assert torch.equal(model.backbone.conv1.weight, reference.conv1.weight)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"arch": "vgg16"}, "arch"),
        ({"image_size": [3, 8, 8]}, "image_size"),
        ({"lr": -1}, "lr"),
        ({"batch_size": 0}, "batch_size"),
        ({"pretrained": True}, "pretrained_path"),
        ({"device": "tpu"}, "device"),
        ({"schedule": "step"}, "schedule"),
        ({"select": "val_acc"}, "select"),
        ({"crop": [0.5, 0.0, 0.6, 1.0]}, "crop"),
        ({"crop": [0.0, 0.0, 1.0]}, "crop"),
        ({"bn_recalibrate": "yes"}, "bn_recalibrate"),
    ],
)
def test_config_rejects_bad_values_with_the_field_name(overrides, message):
    with pytest.raises(ConfigError, match=message):
        ResNetConfig(**overrides)


def test_config_round_trips_and_rejects_unknown_keys():
    config = small_config(dropout=0.0)
    assert ResNetConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="unknown config field"):
        ResNetConfig.from_dict({"learning_rate": 1e-3})


def test_make_scene_is_uint8_hwc_and_deterministic_per_seed():
    a = make_scene(True, 32, np.random.default_rng(0))
    b = make_scene(True, 32, np.random.default_rng(0))
    assert a.dtype == np.uint8 and a.shape == (32, 32, 3)
    assert np.array_equal(a, b)
    assert ((a == (220, 40, 40)).all(-1)).sum() >= 100
    assert not ((make_scene(False, 32, np.random.default_rng(1)) == (220, 40, 40)).all(-1)).any()


def test_training_loop_skips_a_last_batch_of_one_and_stops_on_cancel(tmp_path):
    from training.kit.reporting import JobCancelled, MemoryReporter
    from training.resnet.train import train_reward_model

    labels = [True, False] * 4 + [True]  # 9 images, batch 8: the lone 9th would break BatchNorm
    images = make_scenes(labels, 32, seed=3)
    config = small_config(batch_size=8, epochs=2, warmup_steps=0, hidden_dim=8, save_rlinf_layout=True)
    reporter = MemoryReporter()
    outcome = train_reward_model(config, images, labels, images[:4], labels[:4], out_dir=tmp_path, reporter=reporter)
    assert outcome.steps == 2 and [s["step"] for s in reporter.steps] == [1, 2]
    assert len(reporter.epochs) == 2 and (tmp_path / "best" / "model.safetensors").exists()
    # RLinf's own trainer layout beside ours, loadable strictly into a fresh model
    rlinf = tmp_path / "checkpoints" / "best_model" / "actor" / "model_state_dict" / "full_weights.pt"
    RewardResNet(config).load_state_dict(torch.load(rlinf, weights_only=True), strict=True)
    assert (tmp_path / "checkpoints" / "global_step_2" / "actor" / "model_state_dict" / "full_weights.pt").exists()
    with pytest.raises(JobCancelled):
        train_reward_model(
            config,
            images,
            labels,
            images[:4],
            labels[:4],
            out_dir=tmp_path / "c",
            reporter=MemoryReporter(cancel_after_steps=1),
        )


def test_the_outcome_times_the_epochs_apart_from_building_the_model_and_writing_checkpoints(tmp_path):
    import time

    from training.resnet.train import train_reward_model

    labels = [True, False] * 4
    images = make_scenes(labels, 32, seed=3)
    config = small_config(batch_size=4, epochs=2, warmup_steps=0, hidden_dim=8, augment=False)
    started = time.perf_counter()
    outcome = train_reward_model(config, images, labels, images[:4], labels[:4], out_dir=tmp_path)
    whole = time.perf_counter() - started
    epochs = sum(entry["epoch_seconds"] for entry in outcome.history)
    assert 0 < epochs <= outcome.loop_seconds < whole
    assert outcome.loop_cpu_seconds > 0


def test_distractor_scenes_show_a_blue_square_on_some_fail_frames():
    frames = make_scenes([False] * 20, 32, seed=4, distractor=True)
    blue = [((f == (40, 60, 220)).all(-1)).sum() > 0 for f in frames]
    assert 0 < sum(blue) < 20
    assert not any(((f == (40, 60, 220)).all(-1)).any() for f in make_scenes([False] * 20, 32, seed=4))


def test_best_checkpoint_holds_the_best_epochs_weights_whether_or_not_it_is_the_last(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from training.kit.reporting import MemoryReporter
    from training.resnet import train as train_module
    from training.resnet.train import train_reward_model

    labels = [True, False] * 6
    images = make_scenes(labels, 32, seed=5)
    config = small_config(batch_size=4, epochs=3, warmup_steps=0, hidden_dim=8, save_rlinf_layout=True)

    def weights(folder):
        return load_file(str(folder / "model.safetensors"))

    def metrics(folder):
        return json.loads((folder / "metrics.json").read_text())

    real_evaluate = train_module.evaluate

    def run(out, val_losses):
        """Train with the validation loss of each epoch given, so the best epoch is known."""
        losses = iter(val_losses)
        snapshots = {}

        def evaluate(model, *args):
            _, accuracy, probs = real_evaluate(model, *args)
            snapshots[len(snapshots) + 1] = {k: v.clone() for k, v in model.state_dict().items()}
            return next(losses), accuracy, probs

        monkeypatch.setattr(train_module, "evaluate", evaluate)
        outcome = train_reward_model(
            config, images, labels, images[:4], labels[:4], out_dir=out, reporter=MemoryReporter()
        )
        return outcome, snapshots

    # the last epoch is the best: best/ has last/'s files (weights, config, metrics alike)
    outcome, snapshots = run(tmp_path / "a", [0.9, 0.8, 0.7])
    best, last = tmp_path / "a" / "best", tmp_path / "a" / "last"
    assert outcome.best_epoch == 3 and metrics(best) == metrics(last) and metrics(best)["epoch"] == 3
    assert (best / "config.json").read_text() == (last / "config.json").read_text()
    for name, value in weights(best).items():
        assert torch.equal(value, snapshots[3][name]) and torch.equal(value, weights(last)[name])
    rlinf_best = torch.load(tmp_path / "a" / "checkpoints" / "best_model" / RLINF_PATH, weights_only=True)
    assert all(torch.equal(v, snapshots[3][k]) for k, v in rlinf_best.items())

    # an earlier epoch is the best: best/ has that epoch's weights and metrics, last/ the final ones
    outcome, snapshots = run(tmp_path / "b", [0.9, 0.5, 0.7])
    best, last = tmp_path / "b" / "best", tmp_path / "b" / "last"
    assert outcome.best_epoch == 2 and metrics(best)["epoch"] == 2 and metrics(last)["epoch"] == 3
    assert all(torch.equal(v, snapshots[2][k]) for k, v in weights(best).items())
    assert all(torch.equal(v, snapshots[3][k]) for k, v in weights(last).items())
    assert not all(torch.equal(v, weights(last)[k]) for k, v in weights(best).items())
    rlinf_best = torch.load(tmp_path / "b" / "checkpoints" / "best_model" / RLINF_PATH, weights_only=True)
    assert all(torch.equal(v, snapshots[2][k]) for k, v in rlinf_best.items())


RLINF_PATH = "actor/model_state_dict/full_weights.pt"


def test_cosine_schedule_decays_from_the_full_rate_after_warmup_towards_zero():
    from training.resnet.train import lr_factor

    warm = [lr_factor(step, 4, "cosine", 20) for step in range(4)]
    assert warm == [0.25, 0.5, 0.75, 1.0]
    after = [lr_factor(step, 4, "cosine", 20) for step in range(4, 20)]
    assert after[0] == 1.0 and all(a > b for a, b in zip(after, after[1:], strict=False)) and after[-1] < 0.01
    assert lr_factor(12, 4, "cosine", 20) == pytest.approx(0.5)  # half way through the decay
    assert [lr_factor(step, 4, "constant", 20) for step in (4, 12, 19)] == [1.0, 1.0, 1.0]


def test_crop_cuts_the_same_part_of_every_image_before_the_resize_and_survives_a_checkpoint(tmp_path):
    config = small_config(crop=[0.25, 0.5, 0.5, 0.5])
    model = RewardResNet(config).eval()
    images = torch.from_numpy(make_scenes([True, False], 48, seed=2))
    uncropped = RewardResNet(small_config()).eval()
    cut = images[:, 12:36, 24:48]  # rows 0.25..0.75 and columns 0.5..1.0 of 48 pixels
    assert torch.allclose(model.preprocess(images), uncropped.preprocess(cut), atol=1e-6)
    assert torch.allclose(model.preprocess(images[:, ::2, ::2]), uncropped.preprocess(cut[:, ::2, ::2]), atol=1e-6)
    save_checkpoint(model, config, tmp_path, metrics={}, step=0)
    reloaded, reloaded_config = load_checkpoint(tmp_path)
    assert reloaded_config.crop == [0.25, 0.5, 0.5, 0.5]
    np.testing.assert_allclose(predict_proba(reloaded, images.numpy()), predict_proba(model, images.numpy()), atol=1e-6)
    # the weights are RLinf's layout whatever the crop: they load strictly into an uncropped model
    RewardResNet(small_config()).load_state_dict(reloaded.state_dict(), strict=True)


def test_batchnorm_recalibration_sets_running_statistics_to_the_images_own():
    from training.resnet.train import recalibrate_batchnorm

    model = RewardResNet(small_config(hidden_dim=8))
    images = torch.from_numpy(make_scenes([True, False] * 4, 32, seed=6))
    weights = {k: v.clone() for k, v in model.named_parameters()}
    bn1 = model.backbone.bn1
    bn1.running_mean.fill_(5.0)  # stale statistics, far from what the images give
    recalibrate_batchnorm(model, images, batch_size=64)  # one batch: the averages are that batch's
    with torch.no_grad():
        activations = model.backbone.conv1(model.preprocess(images))
    assert torch.allclose(bn1.running_mean, activations.mean(dim=(0, 2, 3)), atol=1e-5)
    assert torch.allclose(bn1.running_var, activations.var(dim=(0, 2, 3), unbiased=True), atol=1e-4)
    assert bn1.momentum == 0.1 and not model.training
    assert all(torch.equal(v, weights[k]) for k, v in model.named_parameters())


def test_select_last_keeps_the_last_epoch_with_recalibrated_statistics_as_the_model(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from training.kit.reporting import MemoryReporter
    from training.resnet import train as train_module
    from training.resnet.train import train_reward_model

    labels = [True, False] * 6
    images = make_scenes(labels, 32, seed=5)
    losses = iter([0.9, 0.5, 0.7])  # epoch 2 has the lowest val_loss, yet the last epoch is kept
    real_evaluate = train_module.evaluate

    def evaluate(model, *args):
        _, accuracy, probs = real_evaluate(model, *args)
        return next(losses), accuracy, probs

    monkeypatch.setattr(train_module, "evaluate", evaluate)
    config = small_config(
        batch_size=4, epochs=3, warmup_steps=0, hidden_dim=8, select="last", bn_recalibrate=True, augment=False
    )
    outcome = train_reward_model(
        config, images, labels, images[:4], labels[:4], out_dir=tmp_path, reporter=MemoryReporter()
    )
    best, last = (
        load_file(str(tmp_path / "best" / "model.safetensors")),
        load_file(str(tmp_path / "last" / "model.safetensors")),
    )
    assert outcome.best_epoch == 3 and json.loads((tmp_path / "best" / "metrics.json").read_text())["epoch"] == 3
    assert all(torch.equal(v, last[k]) for k, v in best.items())
    model, _ = load_checkpoint(tmp_path / "best")
    with torch.no_grad():
        activations = model.backbone.conv1(model.preprocess(torch.from_numpy(images)))
    assert torch.allclose(model.backbone.bn1.running_mean, activations.mean(dim=(0, 2, 3)), atol=1e-5)
