"""Login lock-out per username with progressive delays (a django-axes handler).

Failures count per username, whatever the address, so people behind one shared address cannot lock each other
(or the admin) out. At LOGIN_FAILURE_LIMIT failures the username waits LOGIN_FIRST_DELAY_SECONDS after its
last failure, and each further failure doubles the wait, up to LOGIN_COOLOFF_MINUTES: a username under attack
slows down, it is never closed for long. Attempts refused while waiting are not counted
(AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT off), so hammering does not extend the wait. Failures are
remembered for AXES_COOLOFF_TIME and forgotten at a successful login.
"""

from __future__ import annotations

from datetime import timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.utils import timezone


def lockout_delay_s(failures: int, *, limit: int, first_s: float, max_s: float) -> float:
    """Seconds a username waits after its last failure: none below `limit`, then `first_s` doubling per failure."""
    if failures < limit:
        return 0.0
    return min(max_s, first_s * 2 ** min(failures - limit, 32))


def username_wait_s(username: str | None, *, since, now) -> float:
    """Seconds `username` still has to wait before it may try again (0 when it may)."""
    if username is None:
        return 0.0
    seen = AccessAttempt.objects.filter(username=username, attempt_time__gte=since).aggregate(
        failures=Sum("failures_since_start"), last=Max("attempt_time")
    )
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
        username = get_client_username(request, credentials)
        now = timezone.now()
        return username_wait_s(username, since=now - get_cool_off(request), now=now) > 0
