"""The loop on a GPU: ManiSkill PickCube-v1 on its GPU simulator, a PPO trained on a deployment's reward alone
beside the same PPO on the env's own dense reward (same seed, same budget), in one call of under 5 minutes.

- Sim: `gym.make("PickCube-v1", num_envs=N, sim_backend="physx_cuda")` in ManiSkill's `ManiSkillVectorEnv`
  (auto reset, terminations ignored, as ManiSkill's PPO baseline runs it); the policy sees the state.
- PPO: CleanRL's continuous-action PPO with the settings of ManiSkill's own baseline for PickCube
  (examples/baselines/ppo/ppo.py in the ManiSkill repository, which is CleanRL's: a 3x256 tanh MLP, gamma 0.8,
  GAE 0.9, 4 epochs of 32 minibatches, clip 0.2, target KL 0.1); the baseline is a script, not a package,
  so its update is written out here.
- Reward: each step, every env's base-camera frame goes to the deployment through `reward_client`'s same-host
  path (shared memory, `transport="shm"` when the app runs on this machine), with the env's success
  (`env_success`) and the run's name (`stream`), so the reward-hacking monitor and the deployment page's RL
  panel count the run; the policy's reward is the deployment's answer only.
- Output: one JSON line per PPO iteration (run, env steps, seconds, the rollout's success rate, mean reward,
  the reward round trip) appended to `bench/results/rl_loop_gpu_<date>.jsonl` as it goes, so a run cut short
  keeps what it did; a table at the end.

The deployment: `--url --token --deployment` of a running app serving a PickCube reward (e.g. the tour's PickCube
model, deployed with `reward_type soft`, its inference worker on the GPU: `INFERENCE_DEVICE=cuda`). `--smoke`
runs here on the CPU (ManiSkill's CPU simulator and the software Vulkan driver, one env, two iterations of 8
steps) against an app it starts with an untrained ResNet; its figures mean nothing.

    python bench/rl_loop_gpu.py --url http://127.0.0.1:8000 --token TOKEN --deployment pick-cube [--budget-s 270]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))
import harness  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def make_env(args: argparse.Namespace):
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401 - registers PickCube-v1
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

    from robot_agent.vulkan import ensure_vulkan_icd

    ensure_vulkan_icd()
    gpu = args.device.startswith("cuda")
    env = gym.make(
        "PickCube-v1",
        num_envs=args.envs,
        obs_mode="state",
        control_mode="pd_ee_delta_pos",
        reward_mode="normalized_dense",
        sim_backend="physx_cuda" if gpu else "physx_cpu",
        render_backend="gpu" if gpu else "cpu",
        sensor_configs=dict(width=args.size, height=args.size),
    )
    return ManiSkillVectorEnv(env, args.envs, ignore_terminations=True, record_metrics=True)


def camera_frames(env) -> np.ndarray:
    """uint8 [N, H, W, 3]: each env's base-camera frame now."""
    images = env.unwrapped.get_sensor_images()["base_camera"]["rgb"]
    return images.cpu().numpy().astype(np.uint8)


def agent_for(obs_dim: int, act_dim: int, device: str):
    import torch
    from torch import nn

    def layer(i: int, o: int, std: float = np.sqrt(2)) -> nn.Linear:
        lin = nn.Linear(i, o)
        nn.init.orthogonal_(lin.weight, std)
        nn.init.constant_(lin.bias, 0.0)
        return lin

    class Agent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.critic = nn.Sequential(
                layer(obs_dim, 256), nn.Tanh(), layer(256, 256), nn.Tanh(), layer(256, 256), nn.Tanh(), layer(256, 1)
            )
            self.actor_mean = nn.Sequential(
                layer(obs_dim, 256),
                nn.Tanh(),
                layer(256, 256),
                nn.Tanh(),
                layer(256, 256),
                nn.Tanh(),
                layer(256, act_dim, 0.01 * np.sqrt(2)),
            )
            self.actor_logstd = nn.Parameter(torch.ones(1, act_dim) * -0.5)

        def value(self, x):
            return self.critic(x)

        def act(self, x, action=None):
            mean = self.actor_mean(x)
            dist = torch.distributions.Normal(mean, torch.exp(self.actor_logstd.expand_as(mean)))
            action = dist.sample() if action is None else action
            return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)

    return Agent().to(device)


def ppo_run(args: argparse.Namespace, reward: str, client, out: Path) -> list[dict]:
    """PPO for `--budget-s` / 2 seconds (or `--iterations`) on `reward` ("env" or "learned"); a row per iteration."""
    import torch

    torch.manual_seed(args.seed)
    env = make_env(args)
    device = args.device
    obs, _ = env.reset(seed=args.seed)
    obs = obs.float().to(device)
    agent = agent_for(obs.shape[1], env.single_action_space.shape[0], device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5)
    n, t_steps = args.envs, args.steps
    buffers = {k: torch.zeros((t_steps, n), device=device) for k in ("logp", "rewards", "dones", "values")}
    observations = torch.zeros((t_steps, n, obs.shape[1]), device=device)
    actions = torch.zeros((t_steps, n, env.single_action_space.shape[0]), device=device)
    rows, started = [], time.monotonic()
    for iteration in range(args.iterations):
        if time.monotonic() - started > args.budget_s / 2:
            break
        successes, latency = [], 0.0
        for step in range(t_steps):
            observations[step] = obs
            with torch.no_grad():
                action, logp, _, value = agent.act(obs)
            obs, env_reward, terminated, truncated, info = env.step(action)
            obs = obs.float().to(device)
            success = info["success"].bool().cpu().numpy()
            if reward == "learned":
                begun = time.perf_counter()
                served = client.compute_rewards(camera_frames(env), env_success=success, stream=f"ppo-{args.seed}")
                latency += time.perf_counter() - begun
                step_reward = torch.as_tensor(served.rewards, device=device)
            else:
                step_reward = env_reward.float().to(device)
            actions[step], buffers["logp"][step], buffers["values"][step] = action, logp, value.flatten()
            buffers["rewards"][step] = step_reward
            buffers["dones"][step] = (terminated | truncated).float().to(device)
            if "final_info" in info:
                done_mask = info["_final_info"].cpu().numpy()
                successes.extend(info["final_info"]["episode"]["success_once"][done_mask].cpu().numpy().tolist())
        ppo_update(agent, optimizer, observations, actions, buffers, obs, args)
        row = {
            "run": reward,
            "iteration": iteration,
            "env_steps": (iteration + 1) * t_steps * n,
            "seconds": round(time.monotonic() - started, 1),
            "success_rate": float(np.mean(successes)) if successes else None,
            "reward_mean": float(buffers["rewards"].mean()),
            "reward_ms_per_step": round(1000 * latency / t_steps, 2) if reward == "learned" else None,
        }
        rows.append(row)
        with out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    env.close()
    return rows


def ppo_update(agent, optimizer, observations, actions, buffers, next_obs, args: argparse.Namespace) -> None:
    """CleanRL's PPO update (GAE, clipped surrogate, value loss, early stop at the target KL)."""
    import torch

    gamma, lam, t_steps = 0.8, 0.9, observations.shape[0]
    with torch.no_grad():
        next_value = agent.value(next_obs).flatten()
        advantages = torch.zeros_like(buffers["rewards"])
        last = 0
        for t in reversed(range(t_steps)):
            value_next = next_value if t == t_steps - 1 else buffers["values"][t + 1]
            nonterminal = 1.0 - buffers["dones"][t]
            delta = buffers["rewards"][t] + gamma * value_next * nonterminal - buffers["values"][t]
            advantages[t] = last = delta + gamma * lam * nonterminal * last
        returns = advantages + buffers["values"]
    flat = {
        "obs": observations.reshape(-1, observations.shape[-1]),
        "actions": actions.reshape(-1, actions.shape[-1]),
        "logp": buffers["logp"].reshape(-1),
        "advantages": advantages.reshape(-1),
        "returns": returns.reshape(-1),
    }
    size = flat["logp"].shape[0]
    minibatch = max(1, size // 32)
    for _ in range(4):
        order = torch.randperm(size, device=observations.device)
        for start in range(0, size, minibatch):
            idx = order[start : start + minibatch]
            _, logp, entropy, value = agent.act(flat["obs"][idx], flat["actions"][idx])
            ratio = (logp - flat["logp"][idx]).exp()
            adv = flat["advantages"][idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(idx) > 1 else adv
            policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
            value_loss = 0.5 * ((value.flatten() - flat["returns"][idx]) ** 2).mean()
            optimizer.zero_grad()
            (policy_loss + 0.5 * value_loss).backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
            if ((ratio - 1) - ratio.log()).mean() > 0.1:
                return


def smoke_app(args: argparse.Namespace):
    """Here on the CPU: the web and an inference worker of a scratch app, an untrained ResNet deployed at the
    camera's size, an RL worker's token; (processes, url, token, deployment)."""
    import uuid

    scratch = harness.scratch_environment("rl-loop-gpu")
    import django

    django.setup()
    import torch
    from django.core.files.storage import default_storage
    from django.core.management import call_command

    from inference.services import deployment_create
    from projects.models import Project
    from projects.services import agent_create
    from training.models import TrainedModel
    from training.resnet.checkpoint import save_checkpoint
    from training.resnet.config import ResNetConfig
    from training.resnet.model import RewardResNet

    call_command("migrate", verbosity=0)
    project = Project.objects.create(name=f"rl-loop-gpu-{uuid.uuid4().hex[:6]}")
    torch.manual_seed(0)
    config = ResNetConfig(image_size=[3, args.size, args.size], hidden_dim=16)
    folder = f"checkpoints/rl_loop_gpu_{uuid.uuid4().hex[:8]}"
    save_checkpoint(RewardResNet(config).eval(), config, default_storage.path(folder), metrics={}, step=0)
    model = TrainedModel.objects.create(project=project, kind="resnet", name="untrained", checkpoint_path=folder)
    deployment = deployment_create(name=f"pick-{uuid.uuid4().hex[:6]}", trained_model=model, reward_type="soft")
    token = agent_create(name="ppo", kind="rl_worker", scopes=["rewards"], projects=[project])[1]
    web, url = harness.start_web(scratch / "web.log")
    inference = harness.start_inference_worker(scratch / "inference.log", dict(os.environ))
    harness.wait_for_inference_worker(inference)
    return [web, inference], url, token, deployment.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="", help="a running app (with --token and --deployment)")
    parser.add_argument("--token", default="")
    parser.add_argument("--deployment", default="")
    parser.add_argument("--device", default="cuda", help="cuda: the GPU simulator; cpu: ManiSkill's CPU one")
    parser.add_argument("--envs", type=int, default=512, help="parallel envs")
    parser.add_argument("--steps", type=int, default=50, help="steps per env per PPO iteration (one episode)")
    parser.add_argument("--iterations", type=int, default=10**6, help="at most; --budget-s ends the runs first")
    parser.add_argument("--budget-s", type=float, default=270.0, help="both runs together, seconds")
    parser.add_argument("--size", type=int, default=128, help="camera frames' size (the deployed model's)")
    parser.add_argument("--seed", type=int, default=0)
    args = harness.parse_args(parser, device="cpu", envs=1, steps=8, iterations=2, size=32)
    procs = []
    if args.smoke and not args.url:
        procs, args.url, args.token, args.deployment = smoke_app(args)
    elif not (args.url and args.token and args.deployment):
        raise SystemExit("give --url, --token and --deployment of a running app serving a PickCube reward")
    from reward_client import RewardClient

    out = RESULTS / f"rl_loop_gpu_{datetime.date.today().isoformat()}{'_smoke' if args.smoke else ''}.jsonl"
    if args.smoke:
        out = Path(tempfile.mkdtemp(prefix="rl-loop-gpu-")) / out.name  # a smoke writes no results here
    try:
        client = RewardClient(args.url, args.token, deployment=args.deployment)
        runs = {reward: ppo_run(args, reward, client, out) for reward in ("env", "learned")}
        print(f"transport {client.transport_used or client.transport}; results in {out}")
    finally:
        harness.stop(*procs)
    print(f"{'run':<8} {'iterations':>10} {'env steps':>10} {'last success':>13} {'reward ms/step':>15}")
    for reward, rows in runs.items():
        last = rows[-1] if rows else {}
        success = "-" if last.get("success_rate") is None else f"{last['success_rate']:.2f}"
        print(
            f"{reward:<8} {len(rows):>10} {last.get('env_steps', 0):>10} {success:>13} "
            f"{last.get('reward_ms_per_step') or '-':>15}"
        )


if __name__ == "__main__":
    main()
