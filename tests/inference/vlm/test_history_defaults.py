"""A `history_buffer` deployment with the default history settings never fails a run's first steps."""

from __future__ import annotations

import pytest

from ..conftest import deploy
from .test_api import b64png, frames, post
from .test_api import rl_token as rl_token  # noqa: F401  (fixture)
from .test_api import vlm_model as vlm_model  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

STREAMS = ("env0", "env1", "env2", "env3")


def run_steps(url: str, token: str, steps: int, done_at: dict[str, int] | None = None) -> dict[str, list[dict]]:
    done_at = done_at or {}
    views = {s: (frames(steps, 10 + i), frames(steps, 20 + i)) for i, s in enumerate(STREAMS)}
    items: dict[str, list[dict]] = {s: [] for s in STREAMS}
    for t in range(steps):
        body = {
            "steps": [
                {
                    "stream": s,
                    "main": b64png(views[s][0][t]),
                    "extra": b64png(views[s][1][t]),
                    "done": done_at.get(s) == t,
                }
                for s in STREAMS
            ]
        }
        response = post(url, token, body)
        assert response.status_code == 200, f"step {t}: {response.status_code} {response.text}"
        for item in response.json()["items"]:
            items[item["stream"]].append(item)
    return items


def test_default_history_deployment_answers_every_step_of_fresh_streams_from_the_first(
    project,
    vlm_model,  # noqa: F811
    rl_token,  # noqa: F811
    live_server_url,
    inference_worker_process,
):
    deployment = deploy(vlm_model, reward_mode="history_buffer", interval_reward=0.25)
    assert (deployment.history_size, deployment.min_history_size, deployment.input_interval) == (5, 2, 0)
    url = f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards"
    items = run_steps(url, rl_token, 6)
    # RLinf's unset interval is history_size: the first window at the fifth step, the others get interval_reward
    for stream in STREAMS:
        assert [i["window"] for i in items[stream]] == [0, 0, 0, 0, 5, 0]
        assert all(i["reward"] == 0.25 for i in items[stream] if not i["scored"])

    # RLinf's example settings (history 5, interval 1) with input_on_done: a stream's first step and a step
    # right after a done would be one-frame videos (Qwen3-VL: "t:1 must be larger than temporal_factor:2", and
    # the whole coalesced batch failed); they are not scored, every other step is
    deployment = deploy(vlm_model, reward_mode="history_buffer", input_interval=1, input_on_done=True)
    url = f"{live_server_url}/api/deployments/{deployment.name}/vlm/rewards"
    items = run_steps(url, rl_token, 4, done_at={"env1": 1})
    assert [i["window"] for i in items["env0"]] == [0, 2, 3, 4]
    assert [i["window"] for i in items["env1"]] == [0, 2, 0, 2]
    assert all(i["probabilities"] for s in STREAMS for i in items[s] if i["scored"])
