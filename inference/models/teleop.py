"""Teleoperation sessions (owned by the teleop work)."""
