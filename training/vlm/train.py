"""The LoRA fine-tuning loop for a Qwen3-VL trend classifier (no Django; the job runner wraps it).

Each sample is a window's frames from both views, the prompt, and the label as the answer; the loss is
cross-entropy on the answer tokens only, weighted per label (balance="weight") or with labels drawn
evenly (balance="sample"). The reporter gets every optimiser step and every evaluation.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F

from training.kit import distributed
from training.kit.reporting import JobCancelled, MemoryReporter, Reporter
from training.kit.resume import CheckpointClock, rng_restore, rng_state, state_load, state_save

from .checkpoint import base_load, checkpoint_save, device_pick, dtype_pick
from .config import VLMTrainConfig
from .data import IGNORE_INDEX, TrendWindow, balance_weights, encode_windows, label_counts
from .evaluation import trend_evaluate
from .labels import LABELS
from .prompt import prompt_render
from .rlinf_export import rlinf_export, rlinf_wrappable
from .scoring import ScoreItem, TrendScorer, label_token_ids, pixels_cast

EVALUATION_FILE = "evaluation.json"


def lr_lambda(config: VLMTrainConfig):
    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / (config.warmup_steps + 1)
        if config.schedule == "constant":
            return 1.0
        progress = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
        progress = min(1.0, progress)
        if config.schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def lora_targets(model, wanted: list[str]) -> list[str]:
    """The wanted names that match a module of this model (RLinf's list also names projector layers some
    Qwen3-VL sizes lack), less any name that also names a layer RLinf's peft cannot wrap (so the adapter
    loads in RLinf: its loader rebuilds `target_modules` from the last name of each `full_weights.pt` key, so one
    name shared by a Linear and a Conv3d, Qwen3-VL's vision `attn.proj` and `patch_embed.proj`, makes it raise
    "Target module Conv3d(...) is not supported" for the whole adapter); ValueError when none is left, so a typo
    cannot train nothing."""
    kinds: dict[str, set[bool]] = {}
    wrappable = rlinf_wrappable()
    for name, module in model.named_modules():
        kinds.setdefault(name.rsplit(".", 1)[-1], set()).add(isinstance(module, wrappable))
    present = [name for name in wanted if kinds.get(name) == {True}]
    if not present:
        raise ValueError(f"no module of the model is named any of target_modules {wanted}")
    return present


def lora_wrap(model, config: VLMTrainConfig):
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha or config.lora_rank,  # __post_init__ fills it; None only if unset
        lora_dropout=config.lora_dropout,
        target_modules=lora_targets(model, config.target_modules),
        # peft types the names as a Literal; the config checks the name against peft's list
        init_lora_weights=True if config.lora_init == "default" else config.lora_init,  # type: ignore[arg-type]
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def batch_loss(model, batch, label_ids: list[int], label_index: torch.Tensor, weights: torch.Tensor):
    """(weighted answer-token loss, number of windows whose label token wins among the three)."""
    labels = batch.pop("labels")
    logits = model(**batch).logits.float()
    shift_logits, shift_labels = logits[:, :-1], labels[:, 1:]
    token_loss = F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.shape[-1]),
        shift_labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view(shift_labels.shape)
    mask = (shift_labels != IGNORE_INDEX).float()
    per_sample = (token_loss * mask).sum(1) / mask.sum(1).clamp(min=1)
    loss = (per_sample * weights).sum() / weights.sum()
    first_answer = mask.argmax(dim=1)  # position whose logits predict the first answer token
    rows = torch.arange(len(first_answer), device=logits.device)
    guesses = shift_logits[rows, first_answer][:, label_ids].argmax(-1)
    correct = int((guesses == label_index).sum())
    return loss, correct


class _Batches:
    """An endless stream of training mini-batches: shuffled passes, or label-balanced draws.

    With several ranks every rank draws the same global batch of `batch_size` x world windows and keeps
    every world-th one from its rank's own; each pass is padded (by wrapping) to a multiple of the world
    size, so within a pass the ranks' parts are disjoint (when the world size divides it) and cover it,
    as with DistributedSampler."""

    def __init__(self, windows: list[TrendWindow], config: VLMTrainConfig, rank: int = 0, world_size: int = 1):
        self.windows = windows
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.rng = random.Random(config.seed)
        self.order: list[int] = []
        self.sample_p = balance_weights(windows) / len(windows) if config.balance == "sample" else None
        self.np_rng = np.random.default_rng(config.seed)

    def next(self) -> list[int]:
        size = min(self.config.batch_size, len(self.windows)) * self.world_size
        if self.sample_p is not None:
            drawn = [int(i) for i in self.np_rng.choice(len(self.windows), size=size, p=self.sample_p)]
            return drawn[self.rank :: self.world_size]
        picked: list[int] = []
        while len(picked) < size:
            if not self.order:
                self.order = list(range(len(self.windows)))
                self.rng.shuffle(self.order)
                pad = -len(self.order) % self.world_size  # popped last: the pass's first windows again
                self.order = self.order[len(self.order) - pad :] + self.order
            picked.append(self.order.pop())
        return picked[self.rank :: self.world_size]

    def state(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {
            "rng": [version, list(internal), gauss],
            "order": list(self.order),
            "np_rng": json.dumps(self.np_rng.bit_generator.state),  # 128-bit ints: kept as text
        }

    def restore(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.order = list(state["order"])
        self.np_rng.bit_generator.state = json.loads(state["np_rng"])


def _to_device(batch, device: torch.device, dtype: torch.dtype):
    return pixels_cast(batch.to(device), dtype)


def _batch_encode(
    processor, chunk: list[TrendWindow], prompt: str, config: VLMTrainConfig, device: torch.device, dtype: torch.dtype
) -> tuple[Any, torch.Tensor]:
    """Windows as one input with their answers (on the device, pixels in the model's dtype) and each one's
    label index: for the training steps and the evaluation loss alike."""
    batch = encode_windows(
        processor,
        chunk,
        prompt,
        with_answers=True,
        min_pixels=config.min_pixels,
        max_pixels=config.max_pixels,
        layout=config.input_layout,
    )
    batch = _to_device(batch, device, dtype)
    target = torch.tensor([LABELS.index(w.label) for w in chunk], device=device)
    return batch, target


@torch.no_grad()
def evaluate_loss(model, processor, windows, prompt, config, label_ids, device, dtype) -> dict:
    model.eval()
    total_loss, correct = 0.0, 0
    for start in range(0, len(windows), max(1, config.batch_size)):
        chunk = windows[start : start + max(1, config.batch_size)]
        batch, target = _batch_encode(processor, chunk, prompt, config, device, dtype)
        loss, ok = batch_loss(model, batch, label_ids, target, torch.ones(len(chunk), device=device))
        total_loss += float(loss) * len(chunk)
        correct += ok
    model.train()
    n = max(1, len(windows))
    return {"val_loss": total_loss / n, "val_acc": correct / n}


def train_vlm(
    config: VLMTrainConfig,
    train_windows: list[TrendWindow],
    eval_windows: list[TrendWindow],
    out_dir: str | Path,
    *,
    reporter: Reporter | None = None,
    prompt: str | None = None,
    resume: bool = False,
    checkpoint_seconds: float = 0.0,
) -> dict:
    """Fine-tune, evaluate every `eval_every` steps and at the end, save the checkpoint into `out_dir`.

    The prompt is the config's template filled in, unless given (a dataset snapshot's own prompt). A resume
    state (adapter weights, optimiser, scheduler, step, batch order and RNGs) is saved after every evaluation
    and after the first step `checkpoint_seconds` after the last one (0: after evaluations only); with `resume`
    a saved state of the same config is loaded and training goes on from the step after it.
    """
    reporter = reporter or MemoryReporter()
    if not train_windows:
        raise ValueError("the training split has no windows")
    threads = torch.get_num_threads()
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    try:
        return _train(config, train_windows, eval_windows, Path(out_dir), reporter, prompt, resume, checkpoint_seconds)
    finally:
        torch.set_num_threads(threads)


@dataclass
class _Run:
    """What a run holds from its set-up to its end."""

    config: VLMTrainConfig
    train_windows: list[TrendWindow]
    eval_windows: list[TrendWindow]
    out_dir: Path
    reporter: Reporter
    device: torch.device
    dtype: torch.dtype
    model: Any  # the LoRA-wrapped model
    trained: torch.nn.Module  # the model, or its DistributedDataParallel wrapper under torchrun
    processor: Any
    label_ids: list[int]
    prompt: str
    weights_all: np.ndarray  # each training window's loss weight
    trainable: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    batches: _Batches
    record: distributed.ShardRecord


@dataclass
class _Progress:
    """What the run has done so far (kept in the resume state): each step's loss, the last evaluation, and
    the step the loop starts at."""

    history: list[float] = field(default_factory=list)
    last_eval: dict = field(default_factory=dict)
    first_step: int = 1


def _train(
    config, train_windows, eval_windows, out_dir: Path, reporter, prompt: str | None, resume: bool, every: float
) -> dict:
    run = _run_setup(config, train_windows, eval_windows, out_dir, reporter, prompt)
    started = time.monotonic()
    progress = _progress_resumed(run) if resume else _Progress()
    clock = CheckpointClock(every)
    for step in range(progress.first_step, config.max_steps + 1):
        _step_run(run, progress, clock, step)
    shards = run.record.gathered()
    if not distributed.is_main():  # only rank 0 writes the checkpoint and evaluates it
        history = progress.history
        return {"loss_history": history, "final": {"train_loss": history[-1]}, "evaluation": None, "shards": shards}
    return _finish(run, progress, shards, started)


# ---- set-up ------------------------------------------------------------------------------------------


def _run_setup(config, train_windows, eval_windows, out_dir: Path, reporter, prompt: str | None) -> _Run:
    """Seed, load the base model with its LoRA adapter, and build the optimiser and the batch stream."""
    torch.manual_seed(config.seed)
    device = distributed.rank_device(device_pick(config.device))
    rank, world = distributed.current().rank, distributed.current().world_size
    dtype = dtype_pick(device, config.bf16)
    reporter.log(f"loading {config.base_model_path} on {device} ({dtype})")
    model, processor = _model_load(config)
    trained = distributed.wrap(model)  # DistributedDataParallel under torchrun: LoRA gradients averaged
    label_ids = label_token_ids(processor.tokenizer)
    if prompt is None:
        prompt = prompt_render(config.prompt_template, task=config.task, window_size=config.window_size)
    weights_all = balance_weights(train_windows) if config.balance == "weight" else np.ones(len(train_windows))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config))
    batches = _Batches(train_windows, config, rank, world)
    record = distributed.ShardRecord(limit=distributed.shard_size(len(train_windows)))
    reporter.log(
        f"train windows {label_counts(train_windows)}, eval windows {label_counts(eval_windows)}, "
        f"trainable parameters {sum(p.numel() for p in trainable)}"
    )
    return _Run(
        config=config,
        train_windows=train_windows,
        eval_windows=eval_windows,
        out_dir=out_dir,
        reporter=reporter,
        device=device,
        dtype=dtype,
        model=model,
        trained=trained,
        processor=processor,
        label_ids=label_ids,
        prompt=prompt,
        weights_all=weights_all,
        trainable=trainable,
        optimizer=optimizer,
        scheduler=scheduler,
        batches=batches,
        record=record,
    )


def _model_load(config: VLMTrainConfig) -> tuple[Any, Any]:
    """The base model (gradient checkpointing on if asked) wrapped with a fresh LoRA adapter, in train mode, and
    its processor."""
    model, processor = base_load(config.base_model_path, device=config.device, bf16=config.bf16)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model = lora_wrap(model, config)
    model.train()
    return model, processor


# ---- resume ------------------------------------------------------------------------------------------


def _progress_resumed(run: _Run) -> _Progress:
    """The progress of a saved resume state of the same config, with its adapter, optimiser, scheduler, batch
    stream and RNG states restored; a fresh start when there is none."""
    state = state_load(run.out_dir, config=run.config.to_dict())
    if state is None:
        return _Progress()
    run.model.load_state_dict(state["adapter"], strict=False)
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.batches.restore(state["batches"])
    rng_restore(state["rng"])
    progress = _Progress(list(state["history"]), dict(state["last_eval"]), state["step"] + 1)
    run.reporter.resumed(step=state["step"])
    run.reporter.log(f"resumed from the checkpoint at step {state['step']}")
    return progress


def _state_save(run: _Run, progress: _Progress, clock: CheckpointClock, step: int) -> None:
    if not distributed.is_main():  # rank 0 keeps the one resume state (all ranks hold the same weights)
        clock.reset()
        return
    adapter = {name: p.detach().cpu() for name, p in run.model.named_parameters() if p.requires_grad}
    state_save(
        run.out_dir,
        {
            "config": run.config.to_dict(),
            "step": step,
            "adapter": adapter,
            "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "batches": run.batches.state(),
            "rng": rng_state(),
            "history": progress.history,
            "last_eval": progress.last_eval,
        },
    )
    clock.reset()


# ---- a step ------------------------------------------------------------------------------------------


def _step_run(run: _Run, progress: _Progress, clock: CheckpointClock, step: int) -> None:
    """One optimiser step over `grad_accum` micro-batches, reported; an evaluation when one is due (with the
    resume state saved after it), and the resume state saved when the clock says so."""
    config, reporter = run.config, run.reporter
    if reporter.should_cancel():
        raise JobCancelled(f"cancelled at step {step}")
    run.optimizer.zero_grad(set_to_none=True)
    step_loss, step_correct, step_count = _micro_batches(run)
    if config.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(run.trainable, config.grad_clip)
    run.optimizer.step()
    run.scheduler.step()
    step_loss, step_acc = distributed.all_reduce_mean([step_loss, step_correct / step_count])
    progress.history.append(step_loss)
    lr = float(run.scheduler.get_last_lr()[0])  # a float already: LambdaLR scales the float lr
    reporter.report_step(step, config.max_steps, train_loss=step_loss, train_acc=step_acc, lr=lr)
    due = run.eval_windows and (step % config.eval_every == 0 or step == config.max_steps)
    if due and distributed.is_main():  # the other ranks go on to the next step's cancel check and wait
        progress.last_eval = evaluate_loss(
            run.model, run.processor, run.eval_windows, run.prompt, config, run.label_ids, run.device, run.dtype
        )
        reporter.report_epoch(math.ceil(step / config.eval_every), step=step, **progress.last_eval)
        if step < config.max_steps:  # every evaluation, whatever the clock says (as a ResNet epoch end)
            _state_save(run, progress, clock, step)
    if clock.due() and step < config.max_steps:
        _state_save(run, progress, clock, step)


def _micro_batches(run: _Run) -> tuple[float, int, int]:
    """Forward and backward over the step's micro-batches: (mean loss, windows right, windows seen)."""
    config = run.config
    step_loss, step_correct, step_count = 0.0, 0, 0
    for micro in range(config.grad_accum):
        idx = run.batches.next()
        run.record.add(idx)
        chunk = [run.train_windows[i] for i in idx]
        batch, target = _batch_encode(run.processor, chunk, run.prompt, config, run.device, run.dtype)
        weights = torch.tensor(run.weights_all[idx], dtype=torch.float32, device=run.device)
        # ranks exchange gradients once per optimiser step, after the last micro-batch
        last = micro == config.grad_accum - 1
        with distributed.no_sync(run.trained, not last):
            loss, correct = batch_loss(run.trained, batch, run.label_ids, target, weights)
            (loss / config.grad_accum).backward()
        step_loss += loss.item() / config.grad_accum
        step_correct += correct
        step_count += len(chunk)
    return step_loss, step_correct, step_count


# ---- finish ------------------------------------------------------------------------------------------


def _finish(run: _Run, progress: _Progress, shards: list[dict], started: float) -> dict:
    """Write the checkpoint (and RLinf's full_weights.pt if asked), evaluate it on the eval windows."""
    config, out_dir = run.config, run.out_dir
    metrics = {"train_loss": progress.history[-1], **progress.last_eval}
    checkpoint_save(run.model, out_dir, meta=_checkpoint_meta(run, metrics))
    if config.save_full_weights:
        _rlinf_write(run)
    evaluation = _final_evaluation(run) if run.eval_windows else None
    run.reporter.log(f"saved checkpoint to {out_dir} after {time.monotonic() - started:.1f}s")
    return {
        "loss_history": progress.history,
        "final": metrics,
        "checkpoint_path": str(out_dir),
        "evaluation": evaluation,
        "model": run.model,
        "processor": run.processor,
        "shards": shards,
    }


def _checkpoint_meta(run: _Run, metrics: dict) -> dict:
    """What the checkpoint says of itself: the base model, the prompt and inputs it was trained with, the metrics."""
    config = run.config
    return {
        "base_model_path": str(config.base_model_path),
        "prompt_template": config.prompt_template,
        "task": config.task,
        "window_size": config.window_size,
        "input_layout": config.input_layout,
        "prompt": run.prompt,
        "label_token_ids": run.label_ids,
        "min_pixels": config.min_pixels,
        "max_pixels": config.max_pixels,
        "config": config.to_dict(),
        "step": config.max_steps,
        "metrics": metrics,
    }


def _rlinf_write(run: _Run) -> None:
    rlinf = rlinf_export(run.out_dir, model=run.model)
    run.reporter.log(
        f"RLinf: wrote {rlinf['full_weights']} (lora_path {rlinf['lora_path']}, lora_B x {rlinf['scale']:g})"
        if rlinf["loadable"]
        else "RLinf would load this LoRA differently, no full_weights.pt: " + "; ".join(rlinf["reasons"])
    )


def _final_evaluation(run: _Run) -> dict:
    """The trained model's label probabilities and metrics on the eval windows, written to EVALUATION_FILE."""
    config = run.config
    run.model.eval()
    scorer = TrendScorer(
        run.model,
        run.processor,
        max_batch=max(1, config.batch_size),
        min_pixels=config.min_pixels,
        max_pixels=config.max_pixels,
        layout=config.input_layout,
    )
    probs = scorer.probabilities([ScoreItem(w.images(), run.prompt) for w in run.eval_windows])
    labels = cast(list[str], [w.label for w in run.eval_windows])  # each one read by evaluate_loss already
    evaluation = trend_evaluate(probs, labels)
    evaluation["probabilities"] = probs.tolist()
    evaluation["windows"] = [dict(w.meta) for w in run.eval_windows]
    (Path(run.out_dir) / EVALUATION_FILE).write_text(json.dumps(evaluation, indent=1, default=str))
    return evaluation
