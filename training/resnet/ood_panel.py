"""The evaluation page's off-distribution panel, read from beside the checkpoint (no torch: the web process
reads it; training.resnet.ood writes it when the job ends)."""

from __future__ import annotations

import json
import os
from pathlib import Path

OOD_PANEL_FILE = "ood_panel.json"


def write_ood_panel(folder: str | os.PathLike, panel: dict) -> None:
    (Path(folder) / OOD_PANEL_FILE).write_text(json.dumps(panel, indent=2))


def read_ood_panel(folder: str | os.PathLike) -> dict | None:
    """The probes' rows (probe, frames, probability, flagged, score) with the method and threshold, or None for
    a model trained before OOD statistics were fitted."""
    path = Path(folder) / OOD_PANEL_FILE
    return json.loads(path.read_text()) if path.exists() else None
