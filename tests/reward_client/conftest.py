"""The client package's tests run against the real app (its worker process is the session's, tests/conftest.py)."""
