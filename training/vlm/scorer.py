"""The VLM family's scorer for the inference workers: Qwen3-VL trend windows (no Django).

`training.families` names it for the `vlm` kind. Batches are packed windows (`training.vlm.wire`) from the
VLM rewards API, the OpenAI-compatible endpoint and live teleop streams (whose step buffers live in Redis on the web
side, so any worker can take any step): label probabilities for all of them in one batched forward pass,
plus greedy generation for those that ask for it. Workers keep no per-stream state.

Every result carries `probability` = P(positive). Windows are encoded in the model's input layout
(`training.vlm.layout`: its `vlm.json`, else the deployed model's config, else `video`): a `video` model
gets each flat window (main frames then extra frames, however the request sent them) as its two videos.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..kit.family_parts import ModelSpec
from .checkpoint import checkpoint_load
from .labels import LABELS
from .layout import VIDEO, layout_of
from .parse import label_parse
from .prompt import prompt_render
from .scoring import ScoreItem, TrendScorer
from .wire import WindowRequest, WireError, is_packed, unpack_window


def result_for(
    probabilities: npt.NDArray[Any], text: str | None = None, usage: tuple[int, int] = (0, 0)
) -> dict[str, Any]:
    probs = {label: float(p) for label, p in zip(LABELS, probabilities, strict=True)}
    return {
        "probability": probs["positive"],
        "probabilities": probs,
        "label": LABELS[int(np.argmax(probabilities))],
        "text": text,
        "parsed": label_parse(text) if text is not None else None,
        "prompt_tokens": usage[0],
        "completion_tokens": usage[1],
    }


class VLMScorer:
    def __init__(self, spec: ModelSpec):
        model, processor, meta = checkpoint_load(spec.folder, device=spec.device)
        self.meta = meta
        window_size = int(meta.get("window_size") or spec.config.get("window_size") or 5)
        self.prompt = (
            meta.get("prompt")
            or spec.config.get("prompt")
            or prompt_render(meta.get("prompt_template"), task=meta.get("task", ""), window_size=window_size)
        )
        self.layout = layout_of(meta, fallback=layout_of(spec.config))
        # the processor packs a video's frames in groups of this many (Qwen-VL: 2); a shorter video fails in it
        video_processor = getattr(processor, "video_processor", None)
        self.video_min_frames = int(getattr(video_processor, "temporal_patch_size", 1) or 1)
        self.scorer = TrendScorer(
            model,
            processor,
            max_batch=16,
            min_pixels=meta.get("min_pixels"),
            max_pixels=meta.get("max_pixels"),
            layout=self.layout,
        )

    def score(self, batch: npt.NDArray[np.uint8]) -> list[dict[str, Any]]:
        if is_packed(batch):
            return self.score_windows([unpack_window(row) for row in batch])
        raise WireError(
            f"VLM deployments take packed windows (training.vlm.wire), got {batch.dtype} {list(batch.shape)}"
        )

    def score_windows(self, windows: list[WindowRequest]) -> list[dict[str, Any]]:
        if self.layout == VIDEO:
            for w in windows:
                if len(w.images) < 2 * self.video_min_frames or len(w.images) % 2:
                    raise WireError(
                        f"this model takes two videos of at least {self.video_min_frames} frames each: send the "
                        f"same number of frames from both views (main then extra), got {len(w.images)} images"
                    )
        items = [ScoreItem(list(w.images), w.prompt or self.prompt) for w in windows]
        probabilities = self.scorer.probabilities(items)
        texts: list[str | None] = [None] * len(items)
        usage = [(0, 0)] * len(items)
        wanted = [i for i, w in enumerate(windows) if w.generate]
        # one generate call per distinct max_new_tokens (usually just one)
        for budget in sorted({windows[i].max_new_tokens for i in wanted}):
            picks = [i for i in wanted if windows[i].max_new_tokens == budget]
            generated = self.scorer.generate_usage([items[i] for i in picks], max_new_tokens=budget)
            for i, (text, prompt_tokens, completion_tokens) in zip(picks, generated, strict=True):
                texts[i], usage[i] = text, (prompt_tokens, completion_tokens)
        return [result_for(p, t, u) for p, t, u in zip(probabilities, texts, usage, strict=True)]
