"""RLinf 0.3.0's own reward code, run in the interop environment, where our tests used to hold hand-written mirrors.

Invoked as `python side_rlinf_mirrors.py COMMAND` with a JSON object on stdin; prints one JSON object on stdout
(tests/interop/conftest.py `side_run(..., runner="side_rlinf_mirrors.py")`, and bench/rl_scale.py). It imports
RLinf and the shared libraries only, never the project.

Where RLinf 0.3.0 has no released code, it says so: the OpenAI-style API reward worker exists only at RLinf's
repository head (`rlinf/workers/reward/api_reward_worker.py`, not in the 0.3.0 wheel), so `chat_burst` takes
everything 0.3.0 has (the `qwentrend_input_builder`'s window, frame order and prompt text; `InferenceHTTPClient`
`.chat_completion`, which sends the request) and assembles the body as head's `_build_chat_payloads` does:
{"model", "messages": [{"role": "user", "content": [every frame of the main then the extra video as an
`image_url` data URL of a JPEG at quality 95, then one text part with the prompt]}], **sampling_params}. One
thread per window, as head's `_generate` (a ThreadPoolExecutor as wide as the batch); no retries.
"""

from __future__ import annotations

import base64
import inspect
import io
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import torch


def _qwentrend_builder(task: str):
    from rlinf.models.embodiment.reward.vlm_reward_utils.input_builder import get_input_builder

    return get_input_builder("qwentrend_input_builder")(
        default_task_description=task, _processor=None, history_buffer_names=["history_window"]
    )


def _history_input(frames: np.ndarray) -> dict:
    """RLinf's history manager's hand-over for windows [B, 2 views, T, H, W, 3]: per env a list of per-step
    [H, W, 3] tensors, per view."""
    return {
        "history_window": {
            "main_images": [[torch.from_numpy(f) for f in window[0]] for window in frames],
            "extra_view_images": [[torch.from_numpy(f) for f in window[1]] for window in frames],
        }
    }


def _jpeg_data_url(image) -> str:
    """A PIL frame as head's `_frame_to_data_url` sends it: RGB, JPEG quality 95, base64 data URL."""
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=95)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _aiohttp_placeholder() -> None:
    """RLinf's http_client imports aiohttp at its top for its async methods (aiohttp comes with `ray[default]`;
    the side environment installs ray alone). The sync `chat_completion` used here posts with requests only, so
    where aiohttp is missing an empty module stands in for it: any use of the async API would fail loudly."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        sys.modules["aiohttp"] = ModuleType("aiohttp")


def chat_payloads(args: dict) -> list[dict]:
    """The chat bodies for windows `frames` (an .npy [B, 2, T, H, W, 3]): 0.3.0's qwentrend builder gives each
    env's videos and prompt; the body is head's `_build_chat_payloads` shape (see the module)."""
    frames = np.load(args["frames"])
    builder = _qwentrend_builder(args["task"])
    history_input = _history_input(frames)
    valid = builder.get_valid_input_ids({}, history_input)
    prepared = builder.prepare_inputs({}, history_input, valid)
    payloads = []
    for prompt_texts, videos in zip(prepared["prompt_texts_list"], prepared["videos_list"], strict=True):
        content: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": _jpeg_data_url(frame)}} for video in videos for frame in video
        ]
        content.append({"type": "text", "text": prompt_texts[0] if prompt_texts else ""})
        payloads.append(
            {"model": args["model"], "messages": [{"role": "user", "content": content}], **args["sampling_params"]}
        )
    return payloads


def chat_payloads_command(args: dict) -> dict:
    return {"payloads": chat_payloads(args)}


def chat_burst(args: dict) -> dict:
    """Every window's chat request at once through RLinf 0.3.0's `InferenceHTTPClient.chat_completion`, one
    thread each. With `ready_file`/`go_file`: writes the first when the bodies are built, and sends when the second
    appears (so that a caller can start another burst at the same moment). Per request: [status (0: no answer),
    seconds, the answer's text or the error], and with `full` the whole JSON answer after a 200's text."""
    import requests

    _aiohttp_placeholder()
    from rlinf.utils.http_client import InferenceHTTPClient

    payloads = chat_payloads(args)
    client = InferenceHTTPClient(args["base_url"], connect_timeout=float(args.get("connect_timeout", 120.0)))

    def one(payload: dict) -> list:
        body = dict(payload)
        messages, model = body.pop("messages"), body.pop("model")
        started = time.perf_counter()
        try:
            answer = client.chat_completion(messages=messages, model=model, **body)
            text = answer["choices"][0]["message"]["content"]
            return [200, time.perf_counter() - started, text, *([answer] if args.get("full") else [])]
        except requests.HTTPError as exc:
            response = exc.response
            status = response.status_code if response is not None else 0
            text = response.text[:300] if response is not None else str(exc)
            return [status, time.perf_counter() - started, text]
        except Exception as exc:  # a refused or dropped connection: no status, with its reason
            return [0, time.perf_counter() - started, f"{exc.__class__.__name__}: {exc}"[:300]]

    if args.get("ready_file"):
        Path(args["ready_file"]).write_text("ready")
        while not os.path.exists(args["go_file"]):
            time.sleep(0.001)
    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        results = list(pool.map(one, payloads))
    return {"results": results, "prompt": payloads[0]["messages"][0]["content"][-1]["text"]}


def qwentrend_parse(args: dict) -> dict:
    """RLinf 0.3.0's `qwentrend_reward_parser`: the label each text parses to, and the rewards it gives with
    `reward_params` (the parser's constructor arguments)."""
    from rlinf.models.embodiment.reward.vlm_reward_utils import reward_parser

    parser = reward_parser.get_reward_parser("qwentrend_reward_parser")(**args.get("reward_params", {}))
    texts = args["texts"]
    return {
        "labels": [reward_parser._parse_qwentrend_output(text) for text in texts],
        "rewards": parser.parse_rewards(texts).tolist(),
    }


def combine_rewards(args: dict) -> dict:
    """RLinf 0.3.0's EnvWorker.compute_bootstrap_rewards (no bootstrap values): `env_reward_weight * env +
    reward_weight * output`, on [envs, chunk steps] rewards."""
    from rlinf.workers.env.env_worker import EnvWorker

    worker = SimpleNamespace(env_reward_weight=args["env_reward_weight"], reward_weight=args["reward_weight"])
    env_output = SimpleNamespace(rewards=torch.tensor(args["env_rewards"], dtype=torch.float32), dones=None)
    output = torch.tensor(args["model_outputs"], dtype=torch.float32)
    compute = inspect.unwrap(EnvWorker.compute_bootstrap_rewards)  # its own body, without the worker's timer
    combined = compute(worker, env_output, None, output)
    return {"rewards": combined.tolist()}


def assign_history(args: dict) -> dict:
    """RLinf 0.3.0's EnvWorker.assign_history_reward on a rollout's `rewards` ([steps][envs]): the earlier steps
    of each env's window (its `window_lengths`) also get `reward_weight * model_outputs`."""
    from rlinf.workers.env.env_worker import EnvWorker

    rewards = [torch.tensor(step, dtype=torch.float32) for step in args["rewards"]]
    worker = SimpleNamespace(
        history_lengths=[{"history_window": args["window_lengths"]}],
        train_num_envs_per_stage=len(args["window_lengths"]),
        rollout_results=[SimpleNamespace(rewards=rewards)],
        reward_weight=args["reward_weight"],
    )
    EnvWorker.assign_history_reward(worker, 0, torch.tensor(args["model_outputs"], dtype=torch.float32))
    return {"rewards": [step.tolist() for step in rewards]}


def history_vlm_rewards(args: dict) -> dict:
    """RLinf 0.3.0's HistoryVLMRewardModel.compute_reward with its own input builder's `get_valid_input_ids` and
    `apply_gt_success_bonus`; the generate-and-parse step gives `parsed` (one reward per window that has one).
    `window_lengths`: each env's window (0: none yet); `success`: env_infos' per-env success."""
    from rlinf.models.embodiment.reward.vlm_reward_model import HistoryVLMRewardModel, VLMRewardModel

    builder = _qwentrend_builder("")
    lengths = args["window_lengths"]
    history_input = {"history_window": {"main_images": [[0] * n for n in lengths]}}
    parsed = iter(args["parsed"])
    model = SimpleNamespace(
        infer_micro_batch_size=int(args.get("infer_micro_batch_size", 0)),
        interval_reward=float(args["interval_reward"]),
        gt_success_bonus=float(args["gt_success_bonus"]),
        _model=SimpleNamespace(device="cpu"),
    )
    model.slice_observations = lambda obs, s, e: HistoryVLMRewardModel.slice_observations(model, obs, s, e)
    model.slice_history_input = lambda h, s, e: HistoryVLMRewardModel.slice_history_input(model, h, s, e)
    model._slice_batch_value = lambda v, s, e: HistoryVLMRewardModel._slice_batch_value(model, v, s, e)
    model.apply_gt_success_bonus = lambda r, inputs: VLMRewardModel.apply_gt_success_bonus(model, r, inputs)

    def build_inputs(observations: dict, device: Any, history: dict) -> tuple[dict, list[int]]:
        valid = builder.get_valid_input_ids(observations, history)
        return {"windows": len(valid)}, valid

    model.input_builder = SimpleNamespace(build_inputs=build_inputs)
    model._generate_and_parse_rewards = lambda inputs: torch.tensor(
        [next(parsed) for _ in range(inputs["windows"])], dtype=torch.float32
    )
    reward_input: dict[str, Any] = {"history_input": history_input}
    if args.get("success") is not None:
        reward_input["env_infos"] = {"success": torch.tensor(args["success"])}
    rewards = HistoryVLMRewardModel.compute_reward(model, reward_input)
    return {"rewards": rewards.tolist()}


def resnet_threshold(args: dict) -> dict:
    """RLinf 0.3.0's ResNetRewardModel.compute_reward on a backbone whose logits give `probabilities`, with
    `reward_threshold`: the rewards it returns."""
    from rlinf.models.embodiment.reward.resnet_reward_model import ResNetRewardModel

    p = torch.tensor(args["probabilities"], dtype=torch.float32)
    parameter = torch.nn.Parameter(torch.zeros(1))
    model = SimpleNamespace(
        parameters=lambda: iter([parameter]),
        preprocess_images=lambda images: images,
        backbone=lambda images: torch.logit(p.double()).float().unsqueeze(-1),
        cfg={"reward_threshold": args["reward_threshold"]},
    )
    rewards = ResNetRewardModel.compute_reward(model, {"main_images": torch.zeros(len(p), 3, 2, 2)})
    # the probabilities its sigmoid gave (float32: p itself to within a rounding), which its threshold saw
    return {"rewards": rewards.tolist(), "probabilities": torch.sigmoid(model.backbone(None).squeeze(-1)).tolist()}


def _names_a_config(node: Any) -> bool:
    """Whether an attribute chain (`self.cfg.reward.model`, `cfg`, `model_config`) names a config on its way."""
    import ast

    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        if isinstance(node, ast.Attribute) and ("cfg" in node.attr or "config" in node.attr):
            return True
        node = node.value if not isinstance(node, ast.Call) else node.func
    return isinstance(node, ast.Name) and ("cfg" in node.id or "config" in node.id)


def config_key_reads(args: dict) -> dict:
    """Where RLinf 0.3.0's code reads each part of each dotted config key (`<name>` and `...` parts skipped):
    `.get("part")`, `["part"]`, or `.part` on an expression naming a config (`cfg`, `config`); a part under
    `input_builder_params`/`reward_parser_params` counts where it is a field or a constructor argument of
    `qwentrend_input_builder`/`qwentrend_reward_parser`, which RLinf builds from them. Answer: key -> part ->
    ["path:line", ...] (empty: RLinf 0.3.0 never reads it)."""
    import ast
    import dataclasses

    import rlinf
    from rlinf.models.embodiment.reward.vlm_reward_utils import reward_parser
    from rlinf.models.embodiment.reward.vlm_reward_utils.input_builder import get_input_builder

    package = Path(rlinf.__file__).parent
    reads: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        where = str(path.relative_to(package.parent))
        for node in ast.walk(ast.parse(source)):
            name = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                first = node.args[0] if node.args else None
                name = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                name = node.slice.value if isinstance(node.slice.value, str) else None
            elif isinstance(node, ast.Attribute) and _names_a_config(node.value):
                name = node.attr
            if name:
                reads.setdefault(name, []).append(f"{where}:{node.lineno}")
    builder_fields = {f.name for f in dataclasses.fields(get_input_builder("qwentrend_input_builder"))}
    parser_arguments = set(
        inspect.signature(reward_parser.get_reward_parser("qwentrend_reward_parser").__init__).parameters
    )
    answer: dict[str, dict[str, list[str]]] = {}
    for key in args["keys"]:
        parts = [part for part in key.split(".") if part and part != "..." and not part.startswith("<")]
        found: dict[str, list[str]] = {}
        for i, part in enumerate(parts):
            parent = parts[i - 1] if i else ""
            if parent == "input_builder_params":
                found[part] = ["qwentrend_input_builder field"] if part in builder_fields else []
            elif parent == "reward_parser_params":
                found[part] = ["qwentrend_reward_parser argument"] if part in parser_arguments else []
            else:
                found[part] = reads.get(part, [])[:5]
        answer[key] = found
    return answer


COMMANDS = {
    "chat_payloads": chat_payloads_command,
    "chat_burst": chat_burst,
    "qwentrend_parse": qwentrend_parse,
    "combine_rewards": combine_rewards,
    "assign_history": assign_history,
    "history_vlm_rewards": history_vlm_rewards,
    "resnet_threshold": resnet_threshold,
    "config_key_reads": config_key_reads,
}


if __name__ == "__main__":
    command = sys.argv[1]
    if command not in COMMANDS:
        raise SystemExit(f"unknown command {command!r}; one of {', '.join(COMMANDS)}")
    print(json.dumps(COMMANDS[command](json.loads(sys.stdin.read() or "{}"))))
