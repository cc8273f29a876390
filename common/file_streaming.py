"""Stored files and generated downloads sent in blocks, whatever their size.

Under ASGI (uvicorn, as the Procfile runs the web process) Django's FileResponse reads a file through a
synchronous iterator, which the ASGI handler consumes whole into memory before the first byte goes out: a
multi-gigabyte snapshot archive would sit in the web process's memory. This response reads it one block at a
time in a worker thread instead, so the first byte leaves at once and memory stays one block per download.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import IO, Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, HttpRequest, StreamingHttpResponse
from django.utils.http import content_disposition_header

BLOCK_BYTES = 1 << 20


async def _blocks(handle: IO[bytes], size: int) -> AsyncIterator[bytes]:
    read = sync_to_async(handle.read, thread_sensitive=False)
    while block := await read(size):
        yield block


def file_response(request: HttpRequest, handle: IO[bytes], **kwargs: Any) -> FileResponse:
    """A FileResponse for `handle` (same keyword arguments, same headers) that reads it in 1 MiB blocks, in a
    worker thread under ASGI."""
    response = FileResponse(handle, **kwargs)
    response.block_size = BLOCK_BYTES
    if isinstance(request, ASGIRequest):
        response.streaming_content = _blocks(handle, BLOCK_BYTES)
    return response


def _next_block(blocks: Iterator[bytes]) -> bytes | None:
    return next(blocks, None)


async def _async_blocks(blocks: Iterator[bytes]) -> AsyncIterator[bytes]:
    take = sync_to_async(_next_block, thread_sensitive=False)
    while (block := await take(blocks)) is not None:
        yield block


def stream_response(
    request: HttpRequest, blocks: Iterator[bytes], *, content_type: str, attachment: str = ""
) -> StreamingHttpResponse:
    """Bytes made as they are sent (e.g. an archive zipped on the fly); under ASGI each block is made in a
    worker thread, so the event loop never waits on the disk. `attachment`: the file name to save as."""
    content = _async_blocks(blocks) if isinstance(request, ASGIRequest) else blocks
    response = StreamingHttpResponse(content, content_type=content_type)
    if attachment:
        response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=attachment)
    return response
