"""Runs RLinf 0.3.0's VLM reward model on our VLM LoRA export in a side environment (.interop: peft 0.11.1, or
.interop-peft: the newest peft RLinf's `embodied` extra allows).

Invoked by tests/interop/test_rlinf_vlm_lora.py through `side_run(COMMAND, runner="side_rlinf_vlm.py")`: a JSON
object on stdin, one JSON object on stdout. It imports only RLinf and the libraries of its environment, never the
project. The reward model is built as RLinf's reward worker builds it (`model_provider_func`: the registry class
of `reward.model.model_type`, the YAML's `reward.model` with `num_envs`, then `.to()` and `.eval()`), from the
`history_vlm` block of RLinf's documentation; the windows come from RLinf's HistoryManager fed one step at a time
as its env worker feeds it, and the rewards from the model's own `compute_reward`.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch

LABELS = ("positive", "negative", "unclear")

# RLinf's documented QwenTrend reward block (its "history_vlm" guide), as a user copies it into the job's YAML
REWARD_YAML = """
reward:
  use_reward_model: true
  group_name: "RewardGroup"
  reward_mode: history_buffer
  history_reward_assign: true
  reward_weight: 1.0
  env_reward_weight: 0.0
  model:
    model_path: "/path/to/Qwen3-VL-4B-Instruct"
    model_type: "history_vlm"
    lora_path: "/path/to/qwen3-vl-lora-checkpoint"
    gt_success_bonus: 20.0
    precision: "bf16"
    input_builder_name: qwentrend_input_builder
    input_builder_params:
      default_task_description: "Pick up the red cube and place it on the green spot on the table."
    reward_parser_name: qwentrend_reward_parser
    reward_parser_params:
      positive_reward: 1.0
      negative_reward: -0.2
      unclear_reward: 0.0
      invalid_reward: 0.0
    history_buffers:
      history_window:
        history_size: 5
        min_history_size: 5
        input_interval: 1
        history_keys:
          - main_images
          - extra_view_images
        input_on_done: false
    interval_reward: 0.0
    infer_micro_batch_size: 64
    max_new_tokens: 16
    do_sample: false
    temperature: 0.0
    use_chat_template: true
"""


def _conditional_generation(module: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model inside RLinf's peft wrapper (whose forward `generate` calls)."""
    for inner in module.modules():
        if type(inner).__name__.endswith("ForConditionalGeneration"):
            return inner
    raise RuntimeError(f"no *ForConditionalGeneration inside {type(module).__name__}")


def history_vlm_rewards(args: dict) -> dict:
    """`frames`: uint8 [B envs, 2 views, T steps, H, W, 3]; `lora_paths`: {name: reward.model.lora_path}. For each
    lora_path a reward model is built and each step's frames go through RLinf's HistoryManager and
    `compute_reward` (as the env and reward workers do); per step: the rewards, the texts the model generated (seen
    by RLinf's own parser) and the label probabilities of the first generated token (softmax over the three label
    tokens' logits at the prompt's last position, from `compute_reward`'s own forward pass)."""
    import peft

    frames = np.load(args["frames"])
    runs = {name: _run(args, path, frames) for name, path in args["lora_paths"].items()}
    return {"peft": peft.__version__, "runs": runs}


def _run(args: dict, lora_path: str, frames: np.ndarray) -> dict:
    from omegaconf import OmegaConf, open_dict
    from rlinf.models.embodiment.reward import get_reward_model_class
    from rlinf.workers.env.history_manager import HistoryManager

    num_envs, _, steps = frames.shape[:3]
    cfg = OmegaConf.create(REWARD_YAML)
    cfg.reward.model.model_path = args["model_path"]
    cfg.reward.model.lora_path = lora_path
    cfg.reward.model.precision = "fp32"  # the test machine's CPU
    cfg.reward.model.input_builder_params.default_task_description = args["task"]
    model_cfg = cfg.reward.model
    with open_dict(model_cfg):
        model_cfg.num_envs = num_envs
    model = get_reward_model_class(model_cfg.model_type)(model_cfg)
    model = model.to(torch.device("cpu"))
    model.eval()

    tokenizer = model._processor.tokenizer
    label_ids = [tokenizer.convert_tokens_to_ids(label) for label in LABELS]
    first_logits: list[torch.Tensor] = []

    def keep_first_step(_module, _inputs, output) -> None:
        if not first_logits:
            first_logits.append(output.logits[:, -1, :].detach().float())

    texts: list[list[str]] = []
    parse = model.reward_parser.parse_rewards

    def parse_and_keep(outputs: list[str]) -> torch.Tensor:
        texts.append(list(outputs))
        return parse(outputs)

    model.reward_parser.parse_rewards = parse_and_keep
    _conditional_generation(model._model).register_forward_hook(keep_first_step)
    lora_b = [p.abs().sum().item() for n, p in model._model.named_parameters() if "lora_B" in n]

    manager = HistoryManager(cfg.reward, num_envs=num_envs)
    per_step = []
    for step in range(steps):
        observations = {
            "main_images": torch.from_numpy(np.ascontiguousarray(frames[:, 0, step])),
            "extra_view_images": torch.from_numpy(np.ascontiguousarray(frames[:, 1, step])),
        }
        manager.append_to_history_entries(observations)
        history_input, _ = manager.build_history_input(dones=torch.zeros(num_envs, dtype=torch.bool))
        first_logits.clear()
        texts.clear()
        rewards = model.compute_reward({**observations, "history_input": history_input})
        probabilities = torch.softmax(first_logits[0][:, label_ids], dim=-1).tolist() if first_logits else None
        per_step.append(
            {"rewards": rewards.tolist(), "texts": texts[0] if texts else None, "probabilities": probabilities}
        )
    return {"steps": per_step, "lora_modules": len(lora_b), "lora_b_abs_sum": sum(lora_b)}


COMMANDS = {"history_vlm_rewards": history_vlm_rewards}

if __name__ == "__main__":
    result = COMMANDS[sys.argv[1]](json.loads(sys.stdin.read() or "{}"))
    print(json.dumps(result))
