"""The loop closed: does a policy trained on a reward taught in the app learn its task? The whole loop on this
machine's CPU, against the app as users run it (the Procfile's web, worker, training and inference processes):

1. collect: episodes of the corridor (bench/interop/corridor.py: a 32x32 image task whose success, the agent
   on the goal, shows in the frame) by a scripted policy that moves right with probability `--right`, uploaded
   as a sim agent uploads them (robot_agent's IngestClient, the env's success flag on each step);
2. reward: the app's own frame proposals from those flags (generated and accepted through the API; the bench
   writes no label), a snapshot, a ResNet job, and a deployment of its model (a person's session deploys it);
3. RL: the same DQN trained twice per seed with the same budget by DI-engine 0.5.3's released pipelines in
   the interop environment (bench/interop/rl_loop_ding.py): on the env's reward, and on the deployment's
   reward alone through `reward_client.di_engine` (every sampled transition scored by the service, the env's
   success sent beside it to the reward-hacking monitor);
4. evaluation: both greedy policies on the same held-out seeds beside a random policy; the learned-reward
   run's ratio to the env-reward run, the labels used, each stage's wall time and the monitor's verdict.

Exits 1 when the learned-reward policy is no better than random (so `--smoke` fails then). A scratch
database unless DATABASE_URL is given (PostgreSQL recommended: the Celery workers write beside the web):

    .venv/bin/python bench/rl_loop.py [--episodes 120] [--env-steps 2500] [--seeds 3] [--eval-episodes 50]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))
sys.path.append(str(ROOT / "bench" / "interop"))
import harness  # noqa: E402
from corridor import CELLS, MAX_STEPS, Corridor  # noqa: E402

SIDE_PYTHON = ROOT / ".interop" / "bin" / "python"
DING_RUNNER = ROOT / "bench" / "interop" / "rl_loop_ding.py"
EVAL_SEED0 = 1_000_000  # held-out seeds: collection and training draw theirs elsewhere
PASSWORD = "rl-loop-bench-password"
RUN = "rl-loop"


def png(frame: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(frame).save(out, format="PNG")
    return out.getvalue()


def episode_of(seed: int, right: float) -> tuple[list[dict], list[dict[str, bytes]], bool]:
    """One scripted episode as robot_agent uploads it: the reset frame (step 0), then each step's frame."""
    env, rng = Corridor(), np.random.default_rng(seed)
    frame, _ = env.reset(seed=seed)
    steps: list[dict[str, object]] = [
        {"index": 0, "reward": 0.0, "terminated": False, "truncated": False, "success": False}
    ]
    images = [{"main": png(frame)}]
    done = success = False
    while not done:
        action = int(rng.random() < right)
        frame, reward, terminated, truncated, info = env.step(action)
        done, success = terminated or truncated, bool(info["success"])
        steps.append(
            {
                "index": len(steps),
                "action": [float(action)],
                "reward": reward,
                "terminated": terminated,
                "truncated": truncated,
                "success": success,
            }
        )
        images.append({"main": png(frame)})
    return steps, images, success


def random_success(seeds: list[int]) -> float:
    """A uniformly random policy's success on `seeds`."""
    won = 0
    for seed in seeds:
        env, rng = Corridor(), np.random.default_rng(seed + 17)
        env.reset(seed=seed)
        for _ in range(MAX_STEPS):
            _, _, terminated, truncated, info = env.step(int(rng.integers(2)))
            if terminated or truncated:
                won += bool(info["success"])
                break
    return won / len(seeds)


class Api:
    """JSON calls to the running app, with an agent's token or a person's session (CSRF header included)."""

    def __init__(self, base: str, token: str = "") -> None:
        import requests

        self.base, self.session = base, requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def login(self, username: str, password: str) -> None:
        page = self.session.get(f"{self.base}/accounts/login/", timeout=30)
        page.raise_for_status()
        csrf = self.session.cookies["csrftoken"]
        answer = self.session.post(
            f"{self.base}/accounts/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": csrf},
            headers={"Referer": f"{self.base}/accounts/login/"},
            timeout=30,
        )
        if "sessionid" not in self.session.cookies:
            raise SystemExit(f"login as {username} failed ({answer.status_code})")
        self.session.headers["X-CSRFToken"] = self.session.cookies.get("csrftoken") or ""
        self.session.headers["Referer"] = self.base + "/"

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        answer = self.session.request(method, self.base + path, json=body, timeout=60)
        if answer.status_code >= 400:
            raise SystemExit(f"{method} {path} answered {answer.status_code}: {answer.text[:500]}")
        return answer.json()

    def wait(self, path: str, done: tuple[str, ...], timeout_s: float = 1800) -> dict:
        """GET `path` until its `status` is one of `done` (an error for failed/cancelled)."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.call("GET", path)
            if state["status"] in done:
                return state
            if state["status"] in ("failed", "cancelled", "unhealthy") or time.monotonic() > deadline:
                raise SystemExit(f"{path} ended {state['status']}: {state.get('error')}")
            time.sleep(0.5)


def setup(name: str) -> tuple[int, str]:
    """Migrations, a person who may deploy, a project and a sim/RL agent's token (as `manage.py create_agent`)."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from projects.models import Project
    from projects.services import agent_create

    call_command("migrate", verbosity=0)
    get_user_model().objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    project = Project.objects.create(name=name, task_description="move the green block onto the yellow goal")
    scopes = ["ingest", "rewards", "labels", "training"]
    token = agent_create(name=name, kind="rl_worker", scopes=scopes, projects=[project])[1]
    return project.pk, token


def start_app(scratch: Path) -> tuple[list[subprocess.Popen], str]:
    """The Procfile's web, worker, training and inference processes; the web's URL."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    web, url = harness.start_web(scratch / "web.log", env)
    procs = [web]
    for process in ("worker", "training"):
        procs.append(
            subprocess.Popen(
                ["bash", "-c", "exec env " + harness.procfile_line(process)],
                cwd=ROOT,
                env=env,
                stdout=open(scratch / f"{process}.log", "w"),  # noqa: SIM115 - closed with the process
                stderr=subprocess.STDOUT,
            )
        )
    inference = harness.start_inference_worker(scratch / "inference.log", env)
    procs.append(inference)
    harness.wait_for_inference_worker(inference)
    return procs, url


def collect(api_url: str, token: str, project: int, episodes: int, right: float) -> dict:
    from robot_agent.uploader import IngestClient

    client = IngestClient(api_url, token)
    successes = frames = 0
    for seed in range(episodes):
        steps, images, success = episode_of(seed, right)
        client.upload_episode(str(project), steps, images, source="sim", env_id="corridor")
        successes += success
        frames += len(steps)
    client.close()
    return {"episodes": episodes, "success_episodes": successes, "frames": frames}


def reward_model(api: Api, person: Api, project: int, epochs: int) -> dict:
    """Proposals from the env's flags, accepted; a snapshot of the accepted labels; a ResNet job; its deployment."""
    job = api.call("POST", f"/api/projects/{project}/proposals/generate", {})
    api.wait(job["url"], ("succeeded",))
    accepted = api.call("POST", f"/api/projects/{project}/proposals/accept", {"kind": "frame"})
    # up to 4 fail frames per success frame (the form's 2 leaves out most of the cells next to the goal)
    options = {"sources": ["human"], "trend": False, "val_split": 0.2, "seed": 0, "fail_success_ratio": 4.0}
    snapshot = api.call("POST", f"/api/projects/{project}/snapshots", {"options": options})
    snapshot = api.wait(snapshot.get("url") or f"/api/snapshots/{snapshot['id']}", ("ready",))
    config = {
        "image_size": [3, 32, 32],
        "hidden_dim": 32,
        "epochs": epochs,
        "batch_size": 32,
        "lr": 1e-3,
        "warmup_steps": 0,
        "augment": False,  # a shifted crop would move the agent by a cell
        "num_threads": 1,
        "seed": 0,
    }
    job = api.call("POST", f"/api/projects/{project}/jobs", {"snapshot": snapshot["number"], "config": config})
    job = api.wait(f"/api/jobs/{job['id']}", ("succeeded",))
    model = job["models"][0]
    evaluation = api.call("GET", f"/api/models/{model}/evaluation?snapshot={snapshot['id']}&threshold=0.5")
    body = {"name": f"corridor-reward-{model}", "trained_model": model, "reward_type": "soft", "gt_success_bonus": 0.0}
    deployment = person.call("POST", "/api/deployments/", body)
    return {
        "labels": int(accepted["frames"]),
        "snapshot": snapshot["stats"],
        "model": model,
        "val_accuracy": float(evaluation["summary"]["at_threshold"]["accuracy"]),
        "deployment": deployment["name"],
        "served": served_check(api, deployment["name"]),
    }


def served_check(api: Api, deployment: str) -> dict:
    """The deployment's probabilities for a start frame and a goal frame of a held-out seed (its first
    request also has the inference worker load the model)."""
    from reward_client import RewardClient

    env = Corridor()
    start, _ = env.reset(seed=EVAL_SEED0 - 1)
    for _ in range(CELLS - 1):
        goal, *_ = env.step(1)
    client = RewardClient(api.base, api.session.headers["Authorization"].split()[-1], deployment=deployment)
    probabilities = client.compute_rewards(np.stack([start, goal])).probabilities
    return {"start": float(probabilities[0]), "goal": float(probabilities[1])}


def rl_run(reward: str, seed: int, args: argparse.Namespace, app: dict, scratch: Path) -> dict:
    """bench/interop/rl_loop_ding.py in the interop environment (only `reward_client` of the project on its path)."""
    workdir = scratch / f"{reward}-{seed}"
    workdir.mkdir()
    request = {
        "reward": reward,
        "seed": seed,
        "env_steps": args.env_steps,
        "eval_seeds": list(range(EVAL_SEED0, EVAL_SEED0 + args.eval_episodes)),
        "workdir": str(workdir),
        "run": f"{RUN}-seed{seed}",
        **app,
    }
    done = subprocess.run(
        [str(SIDE_PYTHON), str(DING_RUNNER)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"DI-engine run ({reward}, seed {seed}) failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=120, help="scripted episodes uploaded and labeled")
    parser.add_argument("--right", type=float, default=0.7, help="the scripted policy's chance of moving right")
    parser.add_argument("--epochs", type=int, default=10, help="the ResNet job's epochs")
    parser.add_argument("--env-steps", type=int, default=2500, help="each DQN run's budget of env steps")
    parser.add_argument("--seeds", type=int, default=3, help="DQN seeds (each trained on both rewards)")
    parser.add_argument("--eval-episodes", type=int, default=50, help="held-out episodes per greedy evaluation")
    # The smoke's one DQN run gets the default's budget of env steps: at 1,500 a learned-reward run once stopped
    # with a greedy policy that never reached the goal (its exploring episodes did, 0.94), failing the check.
    args = harness.parse_args(parser, episodes=60, epochs=8, env_steps=2500, seeds=1, eval_episodes=20)
    if not SIDE_PYTHON.is_file():
        raise SystemExit("the interop environment is missing: source scripts/lib.sh; ensure_interop_env")
    scratch = harness.scratch_environment("rl-loop")
    started = time.monotonic()
    stages: dict[str, float] = {}
    project, token = setup(f"rl-loop-{os.getpid()}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout's stop still stops the app below
    procs, url = start_app(scratch)
    stages["app start"] = time.monotonic() - started
    try:
        mark = time.monotonic()
        collected = collect(url, token, project, args.episodes, args.right)
        stages["1. collect + ingest"] = time.monotonic() - mark
        print(f"1. collected and ingested in {stages['1. collect + ingest']:.0f} s", flush=True)
        api, person = Api(url, token), Api(url)
        person.login(f"rl-loop-{os.getpid()}", PASSWORD)
        mark = time.monotonic()
        model = reward_model(api, person, project, args.epochs)
        stages["2. label + snapshot + train + deploy"] = time.monotonic() - mark
        print(f"2. labeled, trained and deployed in {stages['2. label + snapshot + train + deploy']:.0f} s", flush=True)
        app = {"url": url, "token": token, "deployment": model["deployment"]}
        runs: dict[str, list[dict]] = {"env": [], "learned": []}
        mark = time.monotonic()
        for seed in range(args.seeds):
            for reward in runs:
                runs[reward].append(rl_run(reward, seed, args, app, scratch))
                r = runs[reward][-1]
                print(
                    f"  seed {seed} {reward:>7} reward: greedy success {r['success']:.2f}, collected episodes' "
                    f"success {r['collect_success_first_third']:.2f} -> {r['collect_success_last_third']:.2f}, "
                    f"{r['seconds']:.0f} s",
                    flush=True,
                )
        stages["3. DQN runs (both rewards)"] = time.monotonic() - mark
        health = api.call("GET", f"/api/deployments/{model['deployment']}/health")
        monitor = person.call("GET", f"/api/deployments/{model['deployment']}/monitor?hours=1")
    finally:
        harness.stop(*procs)
    eval_seeds = list(range(EVAL_SEED0, EVAL_SEED0 + args.eval_episodes))
    report(args, collected, model, runs, random_success(eval_seeds), stages, health, monitor, started)


def report(args, collected, model, runs, random, stages, health, monitor, started) -> None:
    env = [r["success"] for r in runs["env"]]
    learned = [r["success"] for r in runs["learned"]]
    ratio = statistics.mean(learned) / statistics.mean(env) if statistics.mean(env) else float("nan")
    print(f"corridor: {CELLS} cells, 32x32 RGB frames, {MAX_STEPS} steps at most; held-out seeds {args.eval_episodes}")
    print(
        f"collected {collected['episodes']} episodes ({collected['success_episodes']} success, "
        f"{collected['frames']} frames) by a policy moving right with p={args.right}"
    )
    stats = model["snapshot"]
    print(
        f"labels used: {model['labels']} (the app's frame proposals from the env's flags, accepted); snapshot train "
        f"{stats['train']['total']} frames ({stats['train'].get('success', 0)} success), val {stats['val']['total']}; "
        f"model {model['model']} val accuracy {model['val_accuracy']:.3f}; served p(start frame) "
        f"{model['served']['start']:.3f}, p(goal frame) {model['served']['goal']:.3f}"
    )
    print(f"{'policy':<22} {'success per seed':<24} {'mean':>5}")
    print(f"{'random':<22} {'':<24} {random:>5.2f}")
    for name, values in (("DQN on env reward", env), ("DQN on learned reward", learned)):
        print(f"{name:<22} {' '.join(f'{v:.2f}' for v in values):<24} {statistics.mean(values):>5.2f}")
    print(f"learned/env ratio {ratio:.2f} (target >= 0.90); random {random:.2f} (target < 0.10)")
    runs_seen = monitor["series"]["runs"]
    ours = {run: r for run, r in runs_seen.items() if run.endswith(tuple(f"/{RUN}-seed{s}" for s in range(args.seeds)))}
    rates = ", ".join(
        f"{run.rsplit('/', 1)[-1]} {r['false_success_rate']:.3f} over {r['env_flagged']} frames"
        for run, r in ours.items()
        if r["false_success_rate"] is not None
    )
    print(
        f"reward-hacking monitor: alarm {'RAISED' if health['alarm'] else 'none'} (threshold "
        f"{health['false_success_threshold']}); false-success rate per learned-reward run: {rates or 'no env flags'}"
    )
    for stage, seconds in stages.items():
        print(f"  {stage:<38} {seconds:>7.1f} s")
    print(f"  {'total':<38} {time.monotonic() - started:>7.1f} s (load average {os.getloadavg()[0]:.1f})")
    if statistics.mean(learned) <= random:
        print("FAIL: the learned-reward policy is no better than random")
        sys.exit(1)


if __name__ == "__main__":
    main()
