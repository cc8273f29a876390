"""The three trend labels, in the order every probability vector uses."""

from __future__ import annotations

LABELS: tuple[str, ...] = ("positive", "negative", "unclear")
INVALID = "invalid"
