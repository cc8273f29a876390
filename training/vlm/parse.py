"""Read a trend label out of generated text (formats.md section 4).

A JSON object's `trend` key wins when present; otherwise the last whole-word match of
positive|negative|unclear in the lower-cased text; otherwise `invalid`.
"""

from __future__ import annotations

import json
import re

from .labels import INVALID, LABELS

_WORD = re.compile(r"\b(positive|negative|unclear)\b")
_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)


def _trend_from_json(text: str) -> str | None:
    for match in _OBJECT.finditer(text):
        try:
            obj = json.loads(match.group(0))
        except ValueError:
            continue
        if isinstance(obj, dict) and "trend" in obj:
            value = str(obj["trend"]).strip().lower()
            return value if value in LABELS else INVALID
    return None


def label_parse(text: str) -> str:
    """The label in `text`: one of LABELS, or `invalid`."""
    if not isinstance(text, str):
        return INVALID
    from_json = _trend_from_json(text)
    if from_json is not None:
        return from_json
    matches = _WORD.findall(text.lower())
    return matches[-1] if matches else INVALID
