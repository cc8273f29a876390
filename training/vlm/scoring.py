"""Label probabilities in one forward pass, and greedy generation, for batches of windows.

Probabilities: softmax over the logits of the three label tokens (each label's first token) at the last
prompt position. Batches are left padded, so batched results equal unbatched ones. Windows are encoded
in the model's input layout (`training.vlm.layout`) by the same function training uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .data import encode_images
from .labels import LABELS
from .layout import DEFAULT_LAYOUT, layout_check


def label_token_ids(tokenizer) -> list[int]:
    """The first token of each label, in LABELS order; they must differ or the labels cannot be told apart."""
    ids = []
    for label in LABELS:
        tokens = tokenizer(label, add_special_tokens=False)["input_ids"]
        if not tokens:
            raise ValueError(f"label {label!r} encodes to no tokens")
        ids.append(tokens[0])
    if len(set(ids)) != len(ids):
        raise ValueError(f"the labels' first tokens collide ({ids}); cannot score them in one forward pass")
    return ids


def pixels_cast(batch, dtype: torch.dtype):
    """Image and video pixels in the model's dtype (bf16 on GPUs); token tensors stay integers."""
    for key in ("pixel_values", "pixel_values_videos"):
        if key in batch:
            batch[key] = batch[key].to(dtype)
    return batch


@dataclass
class ScoreItem:
    """One request: the images (main view frames then extra view frames) and the prompt text."""

    images: list[np.ndarray]
    prompt: str


class TrendScorer:
    """Scores windows with a loaded Qwen3-VL (base or with a LoRA adapter) and its processor."""

    def __init__(
        self, model, processor, *, max_batch: int = 8, min_pixels=None, max_pixels=None, layout: str = DEFAULT_LAYOUT
    ):
        self.model = model.eval()
        self.processor = processor
        self.max_batch = max_batch
        self.layout = layout_check(layout)
        self.pixels = {"min_pixels": min_pixels, "max_pixels": max_pixels}
        self.label_ids = label_token_ids(processor.tokenizer)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode(self, items: list[ScoreItem]):
        """The processor inputs for these windows (on the CPU), exactly as they reach the model."""
        return encode_images(
            self.processor,
            [item.images for item in items],
            [item.prompt for item in items],
            layout=self.layout,
            **self.pixels,
        )

    def _inputs(self, items: list[ScoreItem]):
        return pixels_cast(self.encode(items).to(self.device), next(self.model.parameters()).dtype)

    @torch.inference_mode()
    def probabilities(self, items: list[ScoreItem]) -> np.ndarray:
        """[B, 3] probabilities ordered as LABELS."""
        out = []
        for start in range(0, len(items), self.max_batch):
            batch = self._inputs(items[start : start + self.max_batch])
            logits = self.model(**batch, logits_to_keep=1).logits[:, -1, :]
            label_logits = logits[:, self.label_ids].float()
            out.append(torch.softmax(label_logits, dim=-1).cpu().numpy())
        return np.concatenate(out, axis=0) if out else np.zeros((0, len(LABELS)))

    @torch.inference_mode()
    def generate(self, items: list[ScoreItem], *, max_new_tokens: int = 16) -> list[str]:
        """Greedy completions (no sampling), decoded without special tokens."""
        return [text for text, _, _ in self.generate_usage(items, max_new_tokens=max_new_tokens)]

    @torch.inference_mode()
    def generate_usage(self, items: list[ScoreItem], *, max_new_tokens: int = 16) -> list[tuple[str, int, int]]:
        """(text, prompt tokens, completion tokens) per item: the prompt's tokens without padding, and the
        generated tokens up to and including the first end-of-sequence token (OpenAI's `usage`)."""
        out: list[tuple[str, int, int]] = []
        tokenizer = self.processor.tokenizer
        for start in range(0, len(items), self.max_batch):
            batch = self._inputs(items[start : start + self.max_batch])
            prompt_len = batch["input_ids"].shape[1]
            generated = self.model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            new_tokens = generated[:, prompt_len:]
            texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            prompt_counts = batch["attention_mask"].sum(dim=1).tolist()
            for text, row, prompt_count in zip(texts, new_tokens.tolist(), prompt_counts, strict=True):
                out.append((text, int(prompt_count), completion_length(row, tokenizer.eos_token_id)))
        return out


def completion_length(tokens: list[int], eos_token_id) -> int:
    """Generated tokens up to and including the first end-of-sequence token (the rest is padding)."""
    eos = set(eos_token_id) if isinstance(eos_token_id, list | tuple) else {eos_token_id}
    for i, token in enumerate(tokens):
        if token in eos:
            return i + 1
    return len(tokens)
