"""The inference worker process: its loop (take, batch, score, reply), dynamic batching, and reading stored payloads into buffers. No Django."""
