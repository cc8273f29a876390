"""The README's RLinf config-key table and reward-mode names agree with what the API accepts."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def rlinf_table() -> list[tuple[str, str]]:
    """(RLinf config key cell, deployment field cell) for each row of the "RLinf config key" table."""
    start = README.index("| RLinf config key | deployment field |")
    rows = []
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((cells[0], cells[1]))
    return rows


def test_the_reward_mode_row_names_exactly_the_deployment_modes():
    from inference.api import DeploymentSerializer

    (key_cell,) = [key for key, _ in rlinf_table() if key.startswith("`reward.reward_mode`")]
    named = set(re.findall(r"`([a-z_]+)`", key_cell)) - {"reward.reward_mode"}
    assert named == set(DeploymentSerializer().fields["reward_mode"].choices)


def test_every_deployment_field_in_the_table_is_a_writable_field_of_the_api():
    from inference.api import DeploymentSerializer

    writable = {name for name, field in DeploymentSerializer().fields.items() if not field.read_only}
    named = {token for _, cell in rlinf_table() for token in re.findall(r"`([a-z_]+)`", cell)}
    assert {"reward_mode", "reward_type", "threshold", "min_history_size", "input_interval"} <= named & writable
    from inference.models import Deployment

    # the column's other names are values of reward_type, or the model's label_rewards
    assert named - writable <= {*Deployment.RewardType.values, "label_rewards"}, named - writable


def test_the_vlm_request_modes_the_readme_names_are_the_ones_the_api_accepts():
    from inference.vlm.api import VLMRewardsRequestSerializer

    accepted = set(VLMRewardsRequestSerializer().fields["reward_mode"].choices)
    named = set(re.findall(r"request `reward_mode` `([a-z_]+)`", README))
    named |= set(re.findall(r"\(alias `([a-z_]+)`", README))
    assert named == accepted, f"README names {sorted(named)}, the API accepts {sorted(accepted)}"
    deployment_modes = {"per_step", "terminal", "history_buffer"}
    assert not (set(re.findall(r"deployment whose `reward_mode` is\s+`([a-z_]+)`", README)) - deployment_modes)
