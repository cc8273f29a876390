"""Compressed frames (JPEG, PNG) packed for the broker and decoded on the scorer's device: the same probabilities
as the frames decoded first, JPEGs sent to the GPU's decoder only on CUDA, and sizes checked against the records."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from training.family_parts import ModelSpec
from training.resnet.checkpoint import save_checkpoint
from training.resnet.config import ResNetConfig
from training.resnet.image_decode import decode_batch, jpeg_on_device
from training.resnet.model import RewardResNet
from training.resnet.scorer import ResNetScorer
from training.resnet.wire import BUCKET, EncodedImage, images_pack, images_unpack, is_packed

CPU = torch.device("cpu")


def frames(n: int = 5, size: int = 32) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)


def encoded(array: np.ndarray, fmt: str) -> EncodedImage:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return EncodedImage(buffer.getvalue(), array.shape[0], array.shape[1])


def pil_decoded(image: EncodedImage) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(image.data)).convert("RGB"))


@pytest.mark.parametrize(("device", "on_gpu"), [("cpu", False), ("cuda", True), ("cuda:1", True)])
def test_jpegs_go_to_the_gpus_decoder_on_cuda_only(device, on_gpu):
    assert jpeg_on_device(torch.device(device)) is on_gpu


def test_packed_rows_round_trip_and_are_told_apart_from_pixel_batches():
    images = [encoded(f, fmt) for f, fmt in zip(frames(3), ["PNG", "JPEG", "PNG"], strict=True)]
    packed = images_pack(images)
    assert packed.dtype == np.uint8 and packed.ndim == 2 and packed.shape[1] % BUCKET == 0
    assert is_packed(packed) and not is_packed(frames(3)) and images_unpack(packed) == images
    with pytest.raises(ValueError, match="share one size"):
        images_pack([images[0], encoded(frames(1, size=16)[0], "PNG")])
    with pytest.raises(ValueError, match="row 0 is not a packed image"):
        images_unpack(np.zeros((1, 64), np.uint8))


def test_decoding_gives_pils_pixels_for_pngs_and_jpegs():
    source = frames(4)
    pngs = [encoded(f, "PNG") for f in source]
    np.testing.assert_array_equal(decode_batch(pngs, CPU).numpy(), source)  # lossless: the frames themselves
    jpegs = [encoded(f, "JPEG") for f in source]
    decoded = decode_batch(jpegs, CPU).numpy().astype(int)
    expected = np.stack([pil_decoded(j) for j in jpegs]).astype(int)
    assert decoded.shape == (4, 32, 32, 3) and np.abs(decoded - expected).max() <= 2  # libjpeg's rounding


def test_a_frame_that_decodes_to_another_size_than_its_record_is_refused():
    image = encoded(frames(1)[0], "PNG")
    with pytest.raises(ValueError, match="image 0 decodes to 32x32, its record says 16x32"):
        decode_batch([EncodedImage(image.data, 32, 16)], CPU)


def test_the_scorer_gives_packed_frames_the_probabilities_of_the_decoded_ones(tmp_path):
    torch.manual_seed(0)
    model = RewardResNet(ResNetConfig(image_size=[3, 32, 32], hidden_dim=16, dropout=0.0)).eval()
    save_checkpoint(model, model.config, tmp_path, metrics={}, step=1)
    scorer = ResNetScorer(ModelSpec(kind="resnet", folder=tmp_path))
    source = frames(6)
    mixed = [encoded(f, "PNG" if i % 2 else "JPEG") for i, f in enumerate(source)]
    decoded_first = np.stack([pil_decoded(m) for m in mixed])
    np.testing.assert_allclose(scorer.score(images_pack(mixed)), scorer.score(decoded_first), atol=2e-3)
    pngs = [encoded(f, "PNG") for f in source]
    np.testing.assert_allclose(scorer.score(images_pack(pngs)), scorer.score(source), atol=1e-6)
