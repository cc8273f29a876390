"""Point the Vulkan loader at the project's software driver (scripts/setup_vulkan.sh) when none is chosen."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ICD = PROJECT_ROOT / ".vendor" / "vulkan" / "lvp_icd.json"


def ensure_vulkan_icd(icd: Path = DEFAULT_ICD) -> str | None:
    """Set VK_ICD_FILENAMES to the vendored lavapipe ICD if it exists and the variable is unset.

    Returns the value in effect afterwards (None when no driver is configured).
    """
    if not os.environ.get("VK_ICD_FILENAMES") and icd.is_file():
        os.environ["VK_ICD_FILENAMES"] = str(icd)
    return os.environ.get("VK_ICD_FILENAMES")
