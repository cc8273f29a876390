"""Why a job failed, as users see it: one line, no traceback, no absolute server path. The traceback goes
to the log and to the admin (the job's `error_detail`). No Django: the folders to name are passed in."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

MAX_REASON_CHARS = 500
# An absolute path: a slash-led run of path characters (quotes, spaces, commas and colons end it).
_ABSOLUTE = re.compile(r"(?<![\w.~:/-])/(?:[\w.@+-]+/)*[\w.@+-]*")


def path_free(text: str, folders: Mapping[str, Path | str]) -> str:
    """`text` with each named folder shown by its name (`MODEL_DIR/x.pth`) and any other absolute path by
    its last part (`…/x.pth`)."""
    for name, folder in sorted(folders.items(), key=lambda item: -len(str(item[1]))):
        if str(folder) not in ("", "/"):
            text = text.replace(str(folder).rstrip("/"), name)
    return _ABSOLUTE.sub(lambda match: "…/" + match.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def one_line_reason(exc: BaseException, folders: Mapping[str, Path | str], *, prefix_type: bool = True) -> str:
    """The first line of the error's message (with its type unless `prefix_type` is false), paths hidden,
    at most MAX_REASON_CHARS characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    message = lines[0] if lines else ""
    if prefix_type:
        message = f"{exc.__class__.__name__}: {message}" if message else exc.__class__.__name__
    message = path_free(message, folders)
    if len(message) > MAX_REASON_CHARS:
        message = message[: MAX_REASON_CHARS - 1] + "…"
    return message or exc.__class__.__name__


def server_folders() -> dict[str, Path]:
    """The app's folders by the setting that names them (Django settings, read when called)."""
    from django.conf import settings

    return {
        "MODEL_DIR": Path(settings.MODEL_DIR),
        "MEDIA_ROOT": Path(settings.MEDIA_ROOT),
        "RS_DATA_DIR": Path(settings.DATA_DIR),
        "<app>": Path(settings.BASE_DIR),
    }


def failure_reason(exc: BaseException, *, prefix_type: bool = True) -> str:
    """`one_line_reason` with the app's folders named by their settings."""
    return one_line_reason(exc, server_folders(), prefix_type=prefix_type)
