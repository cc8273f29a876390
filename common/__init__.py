"""The ground floor: plumbing every app may use, with no table and no app of its own.

Metrics, request parsers and JSON limits, ASGI helpers, file streaming, API errors, the async-to-database
bridge, the stale cache, trusted networks, and the job kit (`jobs/`: the abstract job row the apps' job models
inherit, its guarded moves and its sweep). Apps import from `webapp` only what is here; this package
imports no app and no other `webapp` module (tests/webapp/test_import_layers.py holds both rules), so
`webapp/` above it only composes the apps (settings, ASGI, URLs, the demo).
"""
