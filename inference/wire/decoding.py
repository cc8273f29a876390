"""Bounded decoding of request images on the web side.

Decoding runs in the request's own worker thread (never on the event loop), and at most
`DECODE_CONCURRENCY` requests decode at once in a process, so the memory decoding can take is
bounded by that number times `MAX_REQUEST_PIXELS` x 3 bytes. A request that waits longer than
`DECODE_WAIT_SECONDS` for a slot gets a 503.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from django.conf import settings
from rest_framework import exceptions, status

from common.images.budget import PixelBudget
from common.parsers import RequestTooLarge  # noqa: F401  (re-exported for the views)

_lock = threading.Lock()
_slots: threading.BoundedSemaphore | None = None


class DecodeBusy(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "too many requests are decoding images; retry shortly"
    default_code = "busy"
    wait = 1  # DRF answers it with `Retry-After: 1`: busy, worth a retry (reward_client retries it)


def _semaphore() -> threading.BoundedSemaphore:
    global _slots
    with _lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(settings.DECODE_CONCURRENCY)
        return _slots


@contextlib.contextmanager
def decode_slot() -> Iterator[None]:
    slots = _semaphore()
    if not slots.acquire(timeout=settings.DECODE_WAIT_SECONDS):
        raise DecodeBusy()
    try:
        yield
    finally:
        slots.release()


def request_budget(max_images: int) -> PixelBudget:
    return PixelBudget(
        max_side=settings.MAX_IMAGE_SIDE,
        max_pixels=settings.MAX_IMAGE_PIXELS,
        max_request_pixels=settings.MAX_REQUEST_PIXELS,
        max_images=max_images,
    )
