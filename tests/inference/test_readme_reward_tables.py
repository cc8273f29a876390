"""The manual's RLinf config-key table (docs/rl-integration.md) and reward-mode names (docs/vlm.md) agree with what the API accepts, and every key in its
"RLinf config key" column is one RLinf 0.3.0's released code reads (checked in the interop environment)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RL_INTEGRATION = (ROOT / "docs" / "rl-integration.md").read_text()  # the "RLinf config key" table
VLM = (ROOT / "docs" / "vlm.md").read_text()  # the VLM request modes


def rlinf_table() -> list[tuple[str, str]]:
    """(RLinf config key cell, deployment field cell) for each row of the "RLinf config key" table."""
    start = RL_INTEGRATION.index("| RLinf config key | deployment field |")
    rows = []
    for line in RL_INTEGRATION[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((cells[0], cells[1]))
    return rows


def test_the_reward_mode_row_names_exactly_the_deployment_modes():
    from inference.api import DeploymentOut

    (key_cell,) = [key for key, _ in rlinf_table() if key.startswith("`reward.reward_mode`")]
    named = set(re.findall(r"`([a-z_]+)`", key_cell)) - {"reward.reward_mode"}
    assert named == set(DeploymentOut().fields["reward_mode"].choices)


def test_every_deployment_field_in_the_table_is_a_writable_field_of_the_api():
    from inference.api import DeploymentOut

    writable = {name for name, field in DeploymentOut().fields.items() if not field.read_only}
    named = {token for _, cell in rlinf_table() for token in re.findall(r"`([a-z_]+)`", cell)}
    assert {"reward_mode", "reward_type", "threshold", "min_history_size", "input_interval"} <= named & writable
    from inference.models import Deployment

    # the column's other names are values of reward_type or chat_prompt, or the model's label_rewards
    values = {*Deployment.RewardType.values, *Deployment.ChatPrompt.values, "label_rewards"}
    assert named - writable <= values, named - writable
    assert set(Deployment.ChatPrompt.values) <= named, "docs/rl-integration.md names every chat_prompt value"


def test_the_vlm_request_modes_the_readme_names_are_the_ones_the_api_accepts():
    from inference.vlm.api import VLMRewardsIn

    accepted = set(VLMRewardsIn().fields["reward_mode"].choices)
    named = set(re.findall(r"request `reward_mode` `([a-z_]+)`", VLM))
    named |= set(re.findall(r"\(alias `([a-z_]+)`", VLM))
    assert named == accepted, f"docs/vlm.md names {sorted(named)}, the API accepts {sorted(accepted)}"
    deployment_modes = {"per_step", "terminal", "history_buffer"}
    assert not (set(re.findall(r"deployment whose `reward_mode` is\s+`([a-z_]+)`", VLM)) - deployment_modes)


def rlinf_keys(cell: str) -> list[str]:
    """The dotted config keys a cell names; a `..._params` key's parenthesised names are keys under it."""
    keys = [token for token in re.findall(r"`([^`]+)`", cell) if "." in token]
    for key in [k for k in keys if k.endswith("_params")]:
        inside = re.search(rf"`{re.escape(key)}`\s*\(([^)]*)\)", cell)
        keys += [f"{key}.{name}" for name in re.findall(r"`(\w+)`", inside.group(1) if inside else "")]
    return keys


def test_every_rlinf_config_key_in_the_table_is_read_by_rlinf_0_3_0():
    from tests.interop.conftest import side_run

    cells = [key for key, _ in rlinf_table() if key != "—"]
    head_only = {key for cell in cells if "head only" in cell for key in rlinf_keys(cell)}
    keys = [key for cell in cells for key in rlinf_keys(cell)]
    assert len(keys) >= 12 and "reward.model.reward_parser_params.positive_reward" in keys
    reads = side_run("config_key_reads", runner="side_rlinf_mirrors.py", keys=keys)
    for key in keys:
        unread = [part for part, where in reads[key].items() if not where]
        if key in head_only:  # marked as RLinf's head only: 0.3.0 must indeed lack it
            assert unread, f"{key} is marked head only, but RLinf 0.3.0 reads it: {reads[key]}"
        else:
            assert not unread, f"docs/rl-integration.md names {key}, but RLinf 0.3.0 never reads {unread}"
    # the check itself tells a key RLinf reads from one it does not
    control = side_run("config_key_reads", runner="side_rlinf_mirrors.py", keys=["reward.model.no_such_key"])
    assert control["reward.model.no_such_key"]["no_such_key"] == []
