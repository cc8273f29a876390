"""The `vlm` model family for the inference workers: Qwen3-VL trend windows (no Django).

Registered with `inference.scorers.register("vlm", ...)`; the worker imports this module the first
time it meets a VLM deployment. Two kinds of batch arrive:

- packed windows (`inference.vlm_wire`), from the VLM rewards API and the OpenAI-compatible endpoint:
  label probabilities for all of them in one batched forward pass, plus greedy generation for those
  that ask for it;
- plain frames `uint8 [B,H,W,3]` (or `[B,2,H,W,3]` with both views), from live streams such as the teleop
  dashboard: the worker keeps a rolling window of the last `window_size` steps per deployment (one live
  stream; a single view stands in for both) and scores it at every step.

Every result carries `probability` = P(positive), so code written for the ResNet family (a probability
per item) shows VLM progress as it is.
"""

from __future__ import annotations

import numpy as np

from training.vlm.checkpoint import checkpoint_load
from training.vlm.history import HistoryConfig, WindowHistory
from training.vlm.labels import LABELS
from training.vlm.parse import label_parse
from training.vlm.prompt import prompt_render
from training.vlm.scoring import ScoreItem, TrendScorer

from .scorers import ModelSpec, register
from .vlm_wire import WireError, is_packed, unpack_window


def result_for(probabilities: np.ndarray, text: str | None = None) -> dict:
    probs = {label: float(p) for label, p in zip(LABELS, probabilities, strict=True)}
    return {
        "probability": probs["positive"],
        "probabilities": probs,
        "label": LABELS[int(np.argmax(probabilities))],
        "text": text,
        "parsed": label_parse(text) if text is not None else None,
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
        self.scorer = TrendScorer(
            model, processor, max_batch=16, min_pixels=meta.get("min_pixels"), max_pixels=meta.get("max_pixels")
        )
        self.live = WindowHistory(HistoryConfig(history_size=window_size, min_history_size=1))

    def score(self, batch: np.ndarray) -> list[dict]:
        if is_packed(batch):
            return self.score_windows([unpack_window(row) for row in batch])
        if batch.dtype == np.uint8 and batch.ndim in (4, 5) and batch.shape[-1] == 3:
            return self.score_live(batch)
        raise WireError(
            f"VLM deployments take packed windows or uint8 frames [B,H,W,3] / [B,2,H,W,3], got {batch.dtype} "
            f"{list(batch.shape)}"
        )

    def score_windows(self, windows) -> list[dict]:
        items = [ScoreItem(list(w.images), w.prompt or self.prompt) for w in windows]
        probabilities = self.scorer.probabilities(items)
        texts: list[str | None] = [None] * len(items)
        wanted = [i for i, w in enumerate(windows) if w.generate]
        # one generate call per distinct max_new_tokens (usually just one)
        for budget in sorted({windows[i].max_new_tokens for i in wanted}):
            picks = [i for i in wanted if windows[i].max_new_tokens == budget]
            for i, text in zip(
                picks, self.scorer.generate([items[i] for i in picks], max_new_tokens=budget), strict=True
            ):
                texts[i] = text
        return [result_for(p, t) for p, t in zip(probabilities, texts, strict=True)]

    def score_live(self, batch: np.ndarray) -> list[dict]:
        results = []
        for step in batch:
            main, extra = (step[0], step[1]) if step.ndim == 4 else (step, step)
            window = self.live.push(np.ascontiguousarray(main), np.ascontiguousarray(extra))
            probabilities = self.scorer.probabilities([ScoreItem(window.images(), self.prompt)])[0]
            results.append(result_for(probabilities))
        return results


register("vlm", VLMScorer)
