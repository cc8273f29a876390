"""Login throttling (django-axes) for every login that comes with a request.

Axes' backend refuses `authenticate()` calls without a request (it counts failures per request's
address). Logins from code with no HTTP request (the test client's `login()`, a shell) are not what it
guards, so this backend lets them through to the model backend; every login form and API login passes
its request and is throttled.
"""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend


class LoginThrottleBackend(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)
