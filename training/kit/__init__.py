"""The Django-free training kit: what a training loop needs on any machine, with no database.

`parallel_config` (how many processes train a job; no torch), `distributed` (data-parallel settings, rank
context, sharding), `resume` (resume checkpoints), `reporting` (the Reporter protocol and an in-memory one)
and `family_parts` (what every model family provides, as types). Nothing here imports Django or an app.
"""
