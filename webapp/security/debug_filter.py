"""What Django's debug error pages may show of the settings: no connection strings or broker URLs.

Django already hides names with KEY, SECRET, TOKEN, PASS...; REDIS_URL, DATABASE_URL, the Celery broker
and the channel layer's hosts carry addresses (and sometimes passwords) too.
"""

from __future__ import annotations

import re

from django.views.debug import SafeExceptionReporterFilter


class SettingsFilter(SafeExceptionReporterFilter):
    hidden_settings = re.compile(
        "API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL|DSN|BROKER|BACKEND|LAYERS|HOSTS|DATABASE|REDIS|CELERY",
        flags=re.IGNORECASE,
    )
