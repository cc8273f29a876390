"""The best checkpoint's validation probabilities, cached beside it as JSON for the evaluation and monitor pages.
No torch: the pages read them in the web process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

VAL_PREDICTIONS = "val_predictions.json"


def write_val_predictions_file(folder: Path, probabilities, labels) -> None:
    data = {"probabilities": [float(p) for p in probabilities], "labels": [int(v) for v in labels]}
    (folder / VAL_PREDICTIONS).write_text(json.dumps(data))


def read_val_predictions(folder: Path) -> tuple[np.ndarray, np.ndarray] | None:
    path = folder / VAL_PREDICTIONS
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return np.asarray(data["probabilities"], dtype=np.float64), np.asarray(data["labels"], dtype=np.int64)
