"""The errors of reading an untrusted pickle, and the sentence worth showing from torch's refusal. No torch.

Kept apart from labeling.imports.safe_pickle (which needs torch for its allow-list) so that the import pages and views,
which only name these errors, do not load torch into the web process.
"""

from __future__ import annotations


class PickleLoadError(ValueError):
    """The file is not a pickle we can read; the message says why."""


class UnsafePickleError(PickleLoadError):
    """The pickle names a global outside the allow-list (it may try to run code)."""


def weights_only_error(exc: Exception) -> tuple[bool, str]:
    """(names a forbidden global, the useful sentence) from torch.load(weights_only=True)'s long error."""
    paragraphs = [part.strip() for part in str(exc).split("\n\n") if part.strip()]
    boilerplate = ("Weights only load failed", "Check the documentation", "Please file an issue")
    useful = [part for part in paragraphs if not part.startswith(boilerplate)]
    detail = useful[0].splitlines()[0] if useful else "unreadable"
    return "global" in detail.lower(), detail
