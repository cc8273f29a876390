"""The agent gate: who may call the agent endpoints (token, cached agent), within which rate limits and bad-request limits, before a body is read."""
