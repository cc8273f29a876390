"""Where a served ResNet runs: pinned non-blocking copies and channels_last only on CUDA (decided from the device
alone, so tested here without one), the deployment's precision on the backbone with fp32 preprocessing, and clear
refusals of what a device cannot run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.evaluation.metrics import precision_difference
from training.evaluation.precision import PrecisionError, precision_check
from training.kit.family_parts import ModelSpec
from training.resnet.checkpoint import save_checkpoint
from training.resnet.config import ResNetConfig
from training.resnet.model import RewardResNet, predict_proba
from training.resnet.placement import HostStaging, Placement, device_check, model_place, placement_for
from training.resnet.scorer import ResNetScorer


def tiny_model(seed: int = 0) -> RewardResNet:
    torch.manual_seed(seed)
    return RewardResNet(ResNetConfig(image_size=[3, 32, 32], hidden_dim=16, dropout=0.0)).eval()


def images(n: int = 6) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    ("device", "precision", "dtype", "on_cuda"),
    [
        ("cpu", "fp32", torch.float32, False),
        ("cpu", "bf16", torch.bfloat16, False),
        ("cuda", "fp16", torch.float16, True),
        ("cuda:1", "bf16", torch.bfloat16, True),
    ],
)
def test_pinned_copies_and_channels_last_are_chosen_for_cuda_only(device, precision, dtype, on_cuda):
    placement = placement_for(device, precision)
    assert placement.device == torch.device(device) and placement.dtype == dtype
    assert placement.pinned is on_cuda and placement.channels_last is on_cuda


def test_an_unknown_precision_or_one_the_family_ignores_is_refused_by_name():
    with pytest.raises(PrecisionError, match="one of fp32, bf16, fp16, got 'fp64'"):
        placement_for("cpu", "fp64")
    with pytest.raises(PrecisionError, match="one of fp32, bf16, fp16"):
        precision_check("resnet", "int8")
    with pytest.raises(PrecisionError, match="applies to ResNet models; a vlm model"):
        precision_check("vlm", "bf16")
    precision_check("vlm", "fp32")
    precision_check("resnet", "fp16")


def test_fp16_on_the_cpu_is_refused_and_bf16_runs():
    with pytest.raises(PrecisionError, match="deploy with bf16 or fp32 for a CPU worker"):
        device_check(placement_for("cpu", "fp16"))
    device_check(placement_for("cpu", "bf16"))


def test_a_cpu_batch_is_used_where_it_lies():
    batch = images()
    tensor = HostStaging(placement_for("cpu")).to_device(batch)
    assert tensor.data_ptr() == batch.ctypes.data and tensor.shape == batch.shape


def test_channels_last_gives_the_same_probabilities_as_the_contiguous_layout():
    batch = images()
    expected = predict_proba(tiny_model(), batch)
    placed = model_place(tiny_model(), Placement(torch.device("cpu"), torch.float32, pinned=False, channels_last=True))
    assert placed.backbone.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_allclose(predict_proba(placed, batch), expected, atol=1e-5)


def test_bf16_casts_the_backbone_keeps_fp32_preprocessing_and_stays_close_to_fp32():
    batch = images(16)
    reference = predict_proba(tiny_model(), batch)
    placed = model_place(tiny_model(), placement_for("cpu", "bf16"))
    assert {p.dtype for p in placed.backbone.parameters()} == {torch.bfloat16}
    assert placed.mean.dtype == placed.std.dtype == torch.float32
    served = predict_proba(placed, batch)
    assert served.dtype == np.float32
    largest, mean, _ = precision_difference(reference, served)
    assert 0 < largest < 0.05 and mean <= largest  # reduced, and not by much


def test_the_scorer_serves_the_specs_precision_and_refuses_what_the_device_cannot(tmp_path):
    model = tiny_model()
    save_checkpoint(model, model.config, tmp_path, metrics={}, step=1)
    batch = images()
    fp32 = ResNetScorer(ModelSpec(kind="resnet", folder=tmp_path))
    bf16 = ResNetScorer(ModelSpec(kind="resnet", folder=tmp_path, precision="bf16"))
    np.testing.assert_allclose(fp32.score(batch), predict_proba(model, batch), atol=1e-6)
    assert bf16.placement.dtype == torch.bfloat16
    np.testing.assert_allclose(bf16.score(batch), fp32.score(batch), atol=0.05)
    with pytest.raises(PrecisionError, match="fp16 on the CPU"):
        ResNetScorer(ModelSpec(kind="resnet", folder=tmp_path, precision="fp16"))


def test_precision_difference_counts_the_decisions_that_flip_at_the_threshold():
    largest, mean, flips = precision_difference([0.1, 0.49, 0.51, 0.9], [0.1, 0.51, 0.52, 0.8], 0.5)
    assert largest == pytest.approx(0.1) and mean == pytest.approx(0.0325) and flips == 1
    assert precision_difference([], []) == (0.0, 0.0, 0)
    with pytest.raises(ValueError, match="3 probabilities to compare with 2"):
        precision_difference([0.1, 0.2], [0.1, 0.2, 0.3])
