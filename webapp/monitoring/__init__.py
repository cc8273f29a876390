"""Whether the app is up: `/healthz`, Procfile heartbeats, and the Prometheus metrics of requests and of the database and Redis state."""
