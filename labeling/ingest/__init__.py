"""Ingest: agents create an episode, append steps in atomic chunks, then finish it. `api` (the REST views),
`serializers`, `chunks` (binary step chunks), `services` (agents, episodes and the atomic, idempotent step
ingest, which imports and the demo use too) and `urls`."""
