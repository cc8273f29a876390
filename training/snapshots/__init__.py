"""Dataset snapshots: `services` (numbering and building the files) and `recovery` (builds that survive
their workers)."""
