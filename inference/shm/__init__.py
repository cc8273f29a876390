"""Same-host frames through shared memory: `frames` (the descriptor and segment reads; no Django), `serving`
(scoring a batch read from a segment) and `api` (the endpoint that takes a descriptor)."""
