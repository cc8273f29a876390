"""The README's "A first tour", step by step, in real Chromium on a fresh database: the run command's demo
data (`manage.py setup_demo` as scripts/run.sh runs it), the printed admin login, a snapshot with the form's
defaults, a job from the *PickCube* preset, the evaluation and its slider, *Deploy…* carrying the
slider's threshold, and rewards through the README's client snippet, run by a Python outside the repository
with `reward_client` installed as the README says (`pip install ./reward_client`). The model passes the
sanity check (no page flags it), beats the majority answer at the slider's threshold and ranks the served
frames well. Its accuracy and the training's time are printed (see README, "A first tour"). The model's
out-of-distribution statistics (issue 35): the evaluation's off-distribution panel flags the blank, constant and
noise probes, and once the deployment is set to pay flagged frames its `fail_reward` (on its settings page), black,
grey and noise frames sent over REST come back `ood: true` with that reward while the validation frames (held out
from training) are flagged at most 1% of the time, as the threshold (their 99th percentile) says."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command

from inference.models import Deployment
from reward_client import RewardClient
from tests.conftest import ROOT
from tests.inference.conftest import direct_probabilities
from training.datasets.rlinf_binary import read_payload
from training.evaluation import metrics as evaluation
from training.evaluation.model_evaluation import model_predictions
from training.models import TrainedModel, TrainingJob
from training.resnet.ood import ood_load
from training.storage import local_path
from webapp.demo.lift import frame_labels
from webapp.demo.pickcube import demo_episodes

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

TRAINING_TIMEOUT_MS = 1_500_000  # the preset's 8 epochs on 24 episodes of 128 px frames: about 560 s on 2 quiet cores
EPISODES = 24  # what the run command seeds (manage.py setup_demo's defaults)
FLAGGED_PROBES = ("black", "white", "constant grey", "uniform noise")  # the panel's blank, constant and noise rows
FAIL_REWARD = -1.0  # what the deployment pays flagged frames once set to fail_reward (the default fail_reward is 0)


def readme_snippet() -> str:
    """The manual's client snippet (docs/serving.md, "Serving rewards to RL workers"), as written there."""
    text = (ROOT / "docs" / "serving.md").read_text()
    section = text[text.index("## Serving rewards to RL workers") :]
    return re.search(r"```python\n(from reward_client import .*?)```", section, re.S).group(1)


def install_reward_client(target: Path) -> None:
    """`pip install ./reward_client`, into a folder of its own (no dependencies: the venv has them)."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps"]
    subprocess.run([*pip, "--no-build-isolation", "--target", str(target), str(ROOT / "reward_client")], check=True)


def run_snippet(
    workdir: Path, *, url: str, token: str, deployment: str, images: np.ndarray, env_rewards: np.ndarray
) -> dict:
    """The README's snippet in a fresh Python whose working folder is outside the repository and whose path
    holds only the installed client (and the venv's site-packages for numpy, requests, Pillow)."""
    site = workdir / "site"
    install_reward_client(site)
    np.save(workdir / "images.npy", images)
    np.save(workdir / "env_rewards.npy", env_rewards)
    snippet = (
        readme_snippet().replace('"http://studio:8000"', "URL").replace('deployment="pick-cube"', "deployment=NAME")
    )
    script = (
        textwrap.dedent(
            """
            import json, sys
            import numpy as np
            URL, token, NAME = sys.argv[1:4]
            images = np.load("images.npy")
            env_r = np.load("env_rewards.npy")
            dones = [False] * (len(images) - 1) + [True]
            data = [{"next_obs": image, "reward": float(r)} for image, r in zip(images, env_r)]
            """
        )
        + snippet
        + textwrap.dedent(
            """
            rlinf = RLinfRewardModel(client).compute_rewards({"main_images": images})
            estimated = DIEngineRewardModel(client).estimate(data)
            bad = [m for m in ("django", "torch", "webapp", "inference", "training", "labeling") if m in sys.modules]
            print(json.dumps({
                "module": __import__("reward_client").__file__, "bad_imports": bad,
                "probabilities": [float(p) for p in result.probabilities], "success": [bool(s) for s in result.success],
                "rewards": [float(r) for r in result.rewards], "rlinf": [float(r) for r in rlinf],
                "di_engine": [float(np.asarray(item["reward"]).reshape(-1)[0]) for item in estimated],
            }))
            """
        )
    )
    (workdir / "tour_client.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, "-P", "tour_client.py", url, token, deployment],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def set_fail_reward_for_ood(page, base_url: str, name: str) -> None:
    """On the deployment's page, as a user would: flagged frames get fail_reward, which is set to FAIL_REWARD."""
    page.goto(f"{base_url}/deployments/{name}/")
    form = page.locator("#settings-form")
    form.locator("[name=ood_action]").select_option("fail_reward")
    form.locator("[name=fail_reward]").fill(str(FAIL_REWARD))
    form.locator("button[type=submit]").click()
    page.wait_for_selector(f"text=Settings of {name} saved")


def _demo_data(settings, tmp_path: Path) -> tuple[str, str]:
    """1. The run command's demo data and admin login (scripts/run.sh: `manage.py setup_demo`); returns the
    printed admin password and the demo agent's token."""
    settings.DATA_DIR = tmp_path / "data"
    out = io.StringIO()
    call_command("setup_demo", stdout=out)
    printed = out.getvalue()
    password = re.search(r"Log in as: admin / (\S+)", printed).group(1)
    token_file = Path(re.search(r"Demo agent token \(for robot_agent / RL workers\): (\S+)", printed).group(1))
    return password, token_file.read_text().strip()


def _log_in_and_open_the_demo(page, live_server_url: str, password: str) -> None:
    """2. As the printed admin, to the PickCube demo's page: its episodes, ready to label, with thumbnails."""
    page.goto(f"{live_server_url}/accounts/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server_url}/")
    page.click("text=PickCube demo")  # the home page lists it
    page.wait_for_url(re.compile(r".*/projects/\d+/$"))
    assert page.locator("#episodes tbody tr").count() == EPISODES  # 2. its episodes, ready to label, with thumbnails
    assert page.locator("#episodes td.thumb img").count() == EPISODES


def _train_with_the_preset(page, screenshot_dir: Path) -> float:
    """3. Training: a snapshot with the form's defaults, then the PickCube preset; returns the training's
    seconds."""
    page.locator("a[href$='/training/']").first.click()
    page.wait_for_selector("#snapshot-form")
    page.locator("#snapshot-form button[type=submit]").click()
    page.wait_for_url(re.compile(r".*/snapshots/\d+/$"))
    page.wait_for_selector("text=Snapshot #1 written", timeout=180_000)
    page.click("#back-to-training")
    page.click("#job-presets a[data-preset=pickcube]")
    job = page.locator("#job-form")
    assert job.locator("[name=image_height]").input_value() == "128"  # the whole frame of a 128 px camera
    assert job.locator("[name=crop]").input_value() == ""  # no crop: RLinf's own class scores it as we do
    job.locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    started = time.monotonic()
    page.wait_for_function(
        "['succeeded', 'failed'].includes(document.getElementById('status').textContent)", timeout=TRAINING_TIMEOUT_MS
    )
    trained_for = time.monotonic() - started
    assert page.locator("#status").inner_text() == "succeeded", TrainingJob.objects.get().error
    page.screenshot(path=str(screenshot_dir / "tour_01_job_done.png"), full_page=True)
    return trained_for


def _check_the_model_is_sane(page, trained_for: float):
    """The model passes the sanity check: in the numbers themselves, on the evaluation and the deploy page; the
    evaluation's off-distribution panel flags the probes. Returns (model, probabilities, labels, majority share)."""
    model = TrainedModel.objects.get()
    assert model.snapshot is not None
    probs, labels = model_predictions(model=model, snapshot=model.snapshot)
    majority = max(labels.mean(), 1 - labels.mean())
    auc = evaluation.roc_curve(probs, labels)["auc"]
    print(
        f"\ntour: training took {trained_for:.0f} s (load average {os.getloadavg()[0]:.1f}); {len(labels)} validation"
        f" frames, majority share {majority:.3f}; accuracy {evaluation.metrics_at(probs, labels)['accuracy']:.3f} at"
        f" 0.5, {evaluation.best_accuracy(probs, labels):.3f} at the best threshold; ROC AUC {auc:.3f}"
    )
    assert evaluation.sanity_check(probs, labels) == []  # a reward worth deploying, on held-out episodes
    assert auc >= 0.8, auc
    assert page.locator("[data-sanity=failed]").count() == 0  # nor does the job page (or the two below) flag it
    page.click("text=Open the evaluation")
    page.wait_for_selector(".gallery a")
    assert page.locator("[data-sanity=failed]").count() == 0
    # the page says RLinf's own class scores this model as we serve it (tests/interop/test_rlinf_presets.py)
    assert page.locator("#rlinf-match").get_attribute("data-rlinf") == "equal"
    # its off-distribution panel: the blank, constant and noise probes are all flagged (training.resnet.ood)
    for probe in FLAGGED_PROBES:
        row = page.locator(f"#ood-panel tr[data-probe='{probe}']")
        assert (float(row.get_attribute("data-flagged")), row.locator("td").last.inner_text()) == (1.0, "yes"), probe
    return model, probs, labels, majority


def _deploy_at_the_best_threshold(page, live_server_url: str, model, probs, labels, majority, screenshot_dir: Path):
    """4. The slider where the evaluation's accuracy is best, then Deploy…: its threshold comes along. Returns
    the deployment."""
    sweep = evaluation.threshold_sweep(probs, labels)
    threshold = f"{max(sweep, key=lambda row: row['accuracy'])['threshold']:.2f}"
    page.locator("#threshold").fill(threshold)
    accuracy = page.locator("[data-metric=accuracy]").first.inner_text()
    assert float(accuracy.rstrip("%")) / 100 > majority, (threshold, accuracy, majority)
    page.click("#deploy-link")
    page.wait_for_url(re.compile(rf".*/models/\d+/deploy\?threshold={re.escape(threshold)}$"))
    assert float(page.locator("#deploy-form [name=threshold]").input_value()) == float(threshold)
    assert page.locator("[data-sanity=failed]").count() == 0
    name = page.locator("#deploy-form [name=name]").input_value()
    page.locator("#deploy-form button[type=submit]").click()
    page.wait_for_url(f"{live_server_url}/deployments/")
    assert page.locator(f"td code:text-is('{name}')").count() == 1
    deployment = Deployment.objects.get(name=name)
    assert deployment.trained_model == model and deployment.threshold == pytest.approx(float(threshold))
    page.screenshot(path=str(screenshot_dir / "tour_02_deployments.png"), full_page=True)
    return deployment


def _check_rewards_through_the_snippet(tmp_path: Path, live_server_url: str, token: str, model, deployment) -> None:
    """Rewards through the README's snippet, from outside the repository: frames of the demo's episodes, as the
    checkpoint answers them, equal over three clients, ranked well."""
    rendered = demo_episodes(EPISODES, size=128)
    picks = []  # (episode, step, its label by the lift: the demo's labels, README step 1), 4 per episode
    for episode in rendered:
        labeled = frame_labels(episode.cube_height, episode.grasped)
        steps = np.linspace(0, len(labeled) - 1, 4).astype(int)
        picks += [(episode, i, labeled[i]) for i in steps if labeled[i] is not None]
    images = np.stack([episode.images["main"][i] for episode, i, _ in picks])
    truth = np.array([label == "success" for _, _, label in picks])
    env_rewards = np.zeros(len(images), dtype=np.float32)
    served = run_snippet(
        tmp_path / "rl-machine",
        url=live_server_url,
        token=token,
        deployment=deployment.name,
        images=images,
        env_rewards=env_rewards,
    )
    assert served["module"].startswith(str(tmp_path)) and served["bad_imports"] == []
    p = np.array(served["probabilities"])
    # what the deployment served is the trained checkpoint's answer on those frames, thresholded at the slider's
    assert np.allclose(p, direct_probabilities(model.checkpoint_path, images), atol=1e-4)
    assert served["success"] == [bool(v > deployment.threshold) for v in p]
    # one deployment, three clients (batched differently: equal to float32 rounding)
    assert np.allclose(served["rewards"], served["rlinf"], atol=1e-5)
    assert np.allclose(served["rewards"], served["di_engine"], atol=1e-5)
    served_auc = evaluation.roc_curve(p, truth)["auc"]
    print(f"tour: served {len(p)} demo frames (train and validation episodes), ROC AUC {served_auc:.3f}")
    assert served_auc >= 0.8, (p.round(2).tolist(), truth.tolist())


def _check_flagged_frames_pay_fail_reward(live_server_url: str, token: str, model, deployment) -> None:
    """Black, grey and noise frames at the camera's size over REST are flagged and paid FAIL_REWARD; the
    validation split's frames (held out from training) are flagged at most 1% of the time."""
    name = deployment.name
    probes = np.stack(  # the demo camera's 128 px
        [
            np.zeros((128, 128, 3), np.uint8),
            np.full((128, 128, 3), 128, np.uint8),
            *np.random.default_rng(35).integers(0, 256, size=(2, 128, 128, 3), dtype=np.uint8),
        ]
    )
    val_images = np.stack(
        [np.asarray(image) for image in read_payload(local_path(model.snapshot.folder) / "val.pt")["images"]]
    )
    client = RewardClient(live_server_url, token, name, transport="http")  # REST, as an RL worker elsewhere
    items = client.compute_rewards(np.concatenate([probes, val_images])).items
    assert items is not None
    flagged = [(item["ood"], item["reward"], item["success"]) for item in items[: len(probes)]]
    assert flagged == [(True, FAIL_REWARD, False)] * len(probes), items[: len(probes)]
    held_out = items[len(probes) :]
    assert all(item["ood"] is not None for item in held_out)
    flagged_held_out = sum(item["ood"] for item in held_out)
    stats = ood_load(local_path(model.checkpoint_path))
    assert stats is not None
    print(
        f"tour: black, grey and 2 noise frames flagged and paid {FAIL_REWARD}; validation frames flagged "
        f"{flagged_held_out} of {len(held_out)} (fitted: {stats.val_flagged:.2%})"
    )
    # the threshold is their 99th percentile: at most 1%, give or take a frame at the threshold in float32
    assert flagged_held_out <= 0.01 * len(held_out) + 1, flagged_held_out


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker_process", "inference_worker_process")
@pytest.mark.timeout(1800)  # the training alone takes minutes on 2 busy cores (pyproject's default: 600 s)
def test_the_readme_tour_ends_with_a_useful_deployed_reward(
    browser, live_server_url, settings, tmp_path, screenshot_dir
):
    password, token = _demo_data(settings, tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _log_in_and_open_the_demo(page, live_server_url, password)
    trained_for = _train_with_the_preset(page, screenshot_dir)
    model, probs, labels, majority = _check_the_model_is_sane(page, trained_for)
    deployment = _deploy_at_the_best_threshold(page, live_server_url, model, probs, labels, majority, screenshot_dir)
    _check_rewards_through_the_snippet(tmp_path, live_server_url, token, model, deployment)

    # 5. flagged frames paid fail_reward (after the snippet, which checks the flag-only default): set on the
    # deployment's page, then black, grey and noise frames at the camera's size over REST, with the validation
    # split's frames (held out from training) beside them
    set_fail_reward_for_ood(page, live_server_url, deployment.name)
    page.close()
    deployment.refresh_from_db()
    assert (deployment.ood_action, deployment.fail_reward) == ("fail_reward", FAIL_REWARD)
    _check_flagged_frames_pay_fail_reward(live_server_url, token, model, deployment)
