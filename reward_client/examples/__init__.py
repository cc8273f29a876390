"""Runnable examples: `python -m reward_client.examples.<name> --help`."""
