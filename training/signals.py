"""Signals training sends so that the apps built on it (inference serves the trained models) can act
without training importing them.

- `redeploy_candidate(policy=RetrainPolicy, new_model=TrainedModel)`: a job of a project whose retrain
  policy names a deployment (`policy.redeploy`) trained `new_model`. The receiver that serves that
  deployment compares it with the served model through `training.queue.retrain.redeploy_compare` and switches
  it when the new one is better.
- `redeploy_target_check(project_id=int, name=str, user=User)`: the retrain policy form asks whether `name`
  is a deployment of the project that `user` may switch. Each receiver answers None (no such deployment
  here), "" (yes) or the refusal to show; with no "yes", the form refuses the name.
"""

from __future__ import annotations

from django.dispatch import Signal

redeploy_candidate = Signal()
redeploy_target_check = Signal()
