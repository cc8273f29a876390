"""The ground floor: plumbing every app may use, with no table and no app of its own.

Metrics, request parsers and JSON limits, ASGI helpers, file streaming, API errors, the async-to-database
bridge, the stale cache, trusted networks, the object store (`filestore/`), the image checks (`images/`) and
the job kit (`jobs/`: the abstract job row the apps' job models inherit, its guarded moves and its sweep). It
imports no app and starts nothing: importing it loads no Django settings and no Celery app
(tests/webapp/test_import_layers.py holds both rules).
"""
