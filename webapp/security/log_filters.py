"""A logging filter that keeps credentials out of logs: `token=`/`api_key=` query values and Bearer tokens
are replaced before a record is written (access lines of uvicorn included). Tokens belong in the
Authorization header, which no access log prints; this catches clients that put one in a URL anyway."""

from __future__ import annotations

import logging
import re

_QUERY = re.compile(r"(?i)\b(token|access_token|api_key|apikey|key)=[^&\s\"']+")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")


def redact(text: str) -> str:
    return _BEARER.sub(r"\1 [redacted]", _QUERY.sub(r"\1=[redacted]", text))


class RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True
