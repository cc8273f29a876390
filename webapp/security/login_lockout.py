"""Login lock-out per username at an address, with progressive delays (a django-axes handler), and the page that
says so.

Failures count per username and address (AXES_LOCKOUT_PARAMETERS, username and ip_address combined): someone
guessing alice's password from elsewhere cannot lock alice out at her own address, and people behind one shared
address cannot lock each other (or the admin) out. At LOGIN_FAILURE_LIMIT failures the pair waits
LOGIN_FIRST_DELAY_SECONDS after its last failure, and each further failure doubles the wait, up to
LOGIN_COOLOFF_MINUTES: a login under attack slows down, it is never closed for long. Attempts refused while
waiting are not counted (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT off), so hammering does not extend the
wait. Failures are remembered for AXES_COOLOFF_TIME and forgotten at a successful login. A refused login gets
`lockout_response`: the app's page saying how long to wait, with the way back to the login form.
"""

from __future__ import annotations

import math
from datetime import timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_ip_address, get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone


def lockout_delay_s(failures: int, *, limit: int, first_s: float, max_s: float) -> float:
    """Seconds a username waits after its last failure: none below `limit`, then `first_s` doubling per failure."""
    if failures < limit:
        return 0.0
    return min(max_s, first_s * 2 ** min(failures - limit, 32))


def username_wait_s(username: str | None, *, address: str | None, since, now) -> float:
    """Seconds `username` still has to wait at `address` before it may try again (0 when it may)."""
    if username is None:
        return 0.0
    attempts = AccessAttempt.objects.filter(username=username, ip_address=address, attempt_time__gte=since)
    seen = attempts.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
    delay = lockout_delay_s(
        seen["failures"] or 0,
        limit=settings.AXES_FAILURE_LIMIT,
        first_s=settings.LOGIN_FIRST_DELAY_SECONDS,
        max_s=settings.LOGIN_COOLOFF_MINUTES * 60,
    )
    if not delay:
        return 0.0
    return max(0.0, (seen["last"] + timedelta(seconds=delay) - now).total_seconds())


class ProgressiveLockoutHandler(AxesDatabaseHandler):
    def is_locked(self, request, credentials: dict | None = None) -> bool:
        if not getattr(settings, "AXES_LOCK_OUT_AT_FAILURE", True):  # set by axes.conf
            return False
        return wait_s(request, credentials) > 0


def wait_s(request: HttpRequest, credentials: dict | None = None) -> float:
    """Seconds this request's username still waits at its address."""
    now = timezone.now()
    address = getattr(request, "axes_ip_address", None) or get_client_ip_address(request)
    username = get_client_username(request, credentials)
    return username_wait_s(username, address=address, since=now - get_cool_off(request), now=now)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict | None = None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the app's page for a refused login (429), with the wait, the time to try again
    and a link back to the login form; a Retry-After header says the same to scripts."""
    wait = max(1, math.ceil(wait_s(request, credentials)))
    response = render(
        request,
        "registration/locked_out.html",
        {
            "wait_s": wait,
            "wait_text": _duration(wait),
            "retry_at": timezone.now() + timedelta(seconds=wait),
            "first_delay_s": settings.LOGIN_FIRST_DELAY_SECONDS,
            "failure_limit": settings.AXES_FAILURE_LIMIT,
            "max_wait_text": _duration(settings.LOGIN_COOLOFF_MINUTES * 60),
            "login_url": request.path if request.path.endswith("/login/") else reverse("login"),  # the admin's too
        },
        status=429,
    )
    response["Retry-After"] = str(wait)
    return response


def _duration(seconds: int) -> str:
    """30 -> "30 seconds", 90 -> "1 minute 30 seconds", 900 -> "15 minutes"."""
    minutes, rest = divmod(int(seconds), 60)
    parts = [f"{minutes} minute{'s' if minutes != 1 else ''}"] if minutes else []
    if rest or not parts:
        parts.append(f"{rest} second{'s' if rest != 1 else ''}")
    return " ".join(parts)
