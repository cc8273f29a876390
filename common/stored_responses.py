"""A stored file as an HTTP answer, whole or one byte range of it (206 Partial Content), from any storage.

Every answer says `Accept-Ranges: bytes`. A Range (`byte_ranges`) is answered with 206 and `Content-Range`, or
416 with `Content-Range: bytes */<size>` when it starts past the end; a Range whose If-Range names another
version of the file is ignored (the whole file). On an S3 storage the range goes into the object's one GET, so
only the bytes asked for leave the store; a local file is read from the range's first byte. Answers of at most
`small_bytes` are one piece; larger ones stream in blocks (under ASGI from a worker thread, as `file_streaming`).
Objects are read on the process's one client (`object_reads`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO, Any

from django.core.files.storage import Storage
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.utils.http import http_date

from .byte_ranges import ByteRange, RangeSpec, Unsatisfiable, if_range_holds, range_requested
from .file_streaming import BLOCK_BYTES, file_response, stream_response
from .filestore import store
from .object_reads import object_client, object_key

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


def stored_response(
    request: HttpRequest, storage: Storage, name: str, *, content_type: str, small_bytes: int
) -> HttpResponseBase:
    """The answer to a GET of stored `name` (Http404 when there is none)."""
    spec = range_requested(request.headers.get("Range"))
    if store.is_s3(storage):
        response = _object_response(request, storage, name, spec, content_type, small_bytes)
    else:
        response = _file_response(request, storage, name, spec, content_type, small_bytes)
    response["Accept-Ranges"] = "bytes"
    return response


def _file_response(
    request: HttpRequest, storage: Storage, name: str, spec: RangeSpec | None, content_type: str, small_bytes: int
) -> HttpResponseBase:
    if not storage.exists(name):
        raise Http404("No such file")
    size = storage.size(name)
    try:
        modified: float | None = storage.get_modified_time(name).timestamp()
    except NotImplementedError:
        modified = None
    if spec is not None and not if_range_holds(request.headers.get("If-Range"), etag=None, modified=modified):
        spec = None
    part: ByteRange | None = None
    if spec is not None:
        try:
            part = spec.resolve(size)
        except Unsatisfiable:
            return _unsatisfiable(size)
    response: HttpResponseBase
    if part is None and size <= small_bytes:
        with storage.open(name, "rb") as handle:
            response = HttpResponse(handle.read(), content_type=content_type)
    elif part is None:
        response = file_response(request, storage.open(name, "rb"), content_type=content_type)
    else:
        handle = storage.open(name, "rb")
        handle.seek(part.start)
        if part.length <= small_bytes:
            with handle:
                response = HttpResponse(handle.read(part.length), content_type=content_type, status=206)
        else:
            blocks = _slice_blocks(handle, part.length)
            response = stream_response(request, blocks, content_type=content_type)
            response.status_code = 206
            response["Content-Length"] = str(part.length)
        response["Content-Range"] = part.content_range(size)
    if modified is not None:
        response["Last-Modified"] = http_date(modified)
    return response


def _slice_blocks(handle: IO[bytes], length: int) -> Iterator[bytes]:
    """`length` bytes from the handle's position, in blocks; the handle is closed at the end."""
    try:
        while length > 0 and (block := handle.read(min(BLOCK_BYTES, length))):
            length -= len(block)
            yield block
    finally:
        handle.close()


def _object_response(
    request: HttpRequest, storage: Storage, name: str, spec: RangeSpec | None, content_type: str, small_bytes: int
) -> HttpResponseBase:
    answer = _object_get(storage, name, spec)
    if answer is None:
        raise Http404("No such file")
    if isinstance(answer, int):
        if not request.headers.get("If-Range"):
            return _unsatisfiable(answer)
        answer = _object_get(storage, name, None)  # unverified If-Range: the whole object, never a wrong 416
        if not isinstance(answer, dict):
            raise Http404("No such file")
    part, size = _answered_range(answer)
    if part is not None:
        etag, modified = answer.get("ETag"), answer["LastModified"].timestamp()
        if not if_range_holds(request.headers.get("If-Range"), etag=etag, modified=modified):
            answer["Body"].close()  # another version than the client's partial copy: the whole object
            answer = _object_get(storage, name, None)
            if not isinstance(answer, dict):
                raise Http404("No such file")
            part, size = None, int(answer["ContentLength"])
    body = answer["Body"]
    length = size if part is None else part.length
    response: HttpResponseBase
    if length <= small_bytes:
        with body:
            response = HttpResponse(body.read(), content_type=content_type)
    else:
        response = stream_response(request, _body_blocks(body), content_type=content_type)
        response["Content-Length"] = str(length)
    if part is not None:
        response.status_code = 206
        response["Content-Range"] = part.content_range(size)
    if answer.get("ETag"):
        response["ETag"] = answer["ETag"]
    response["Last-Modified"] = http_date(answer["LastModified"].timestamp())
    return response


def _body_blocks(body: Any) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(BLOCK_BYTES)
    finally:
        body.close()


def _object_get(storage: Storage, name: str, spec: RangeSpec | None) -> dict[str, Any] | int | None:
    """One GET of the object (only `spec`'s bytes when given): the answer; the object's size when the range
    is unsatisfiable; None when there is no such object."""
    from botocore.exceptions import ClientError

    client, bucket = object_client(storage), storage.bucket_name  # type: ignore[attr-defined]
    key = object_key(storage, name)
    extra = {} if spec is None else {"Range": spec.header()}
    try:
        return dict(client.get_object(Bucket=bucket, Key=key, **extra))
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") in ("NoSuchKey", "404"):
            return None
        if (
            error.get("Code") != "InvalidRange"
            and exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 416
        ):
            raise
    try:  # past the end: the object's size, for the 416's Content-Range
        return int(client.head_object(Bucket=bucket, Key=key)["ContentLength"])
    except ClientError:
        return None


def _answered_range(answer: dict[str, Any]) -> tuple[ByteRange | None, int]:
    """The range the store answered (None: the whole object) and the object's size."""
    match = _CONTENT_RANGE.match(answer.get("ContentRange") or "")
    if match is None:
        return None, int(answer["ContentLength"])
    start, end, size = (int(group) for group in match.groups())
    return ByteRange(start, end), size


def _unsatisfiable(size: int) -> HttpResponse:
    response = HttpResponse(status=416)
    response["Content-Range"] = f"bytes */{size}"
    return response
