"""Command line: `python -m robot_agent run|replay|check ...` (see --help of each)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .maniskill_presets import PRESETS
from .robot import Robot, RobotError

if TYPE_CHECKING:
    from .policies import Policy

POLICIES = ["scripted", "random", "keyboard", "spacemouse", "hold", "replay"]
RUN_ENV_FILE = Path(__file__).resolve().parent.parent / ".run.env"  # written by scripts/run.sh beside the app


def _running_app_url(run_env: Path | None = None) -> str:
    """The address of the app scripts/run.sh started from this checkout (its RS_HOST and RS_PORT), or the
    run command's default address. `RS_RUN_ENV` names another settings file, or none when empty."""
    named = os.environ.get("RS_RUN_ENV")
    path = run_env or (RUN_ENV_FILE if named is None else Path(named) if named else None)
    values: dict[str, str] = {}
    if path is not None and path.is_file():
        pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#")
        values = {name.strip(): value.strip() for name, value in pairs}
    host = values.get("RS_HOST", "127.0.0.1").replace("0.0.0.0", "127.0.0.1")
    return f"http://{host}:{values.get('RS_PORT', '8000')}"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default=os.environ.get("RS_SERVER") or _running_app_url())
    parser.add_argument("--token", default=os.environ.get("RS_AGENT_TOKEN"), help="agent token (or RS_AGENT_TOKEN)")
    parser.add_argument("--project", required=True, help="project name on the server")
    parser.add_argument("--deployment", default="", help="deployment whose model scores the frames (optional)")
    parser.add_argument("--hz", type=float, default=10.0, help="control rate (10-20 Hz)")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=None, help="steps per episode (run: 100; replay: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--format", choices=["png", "jpeg"], default="png",
        help="image encoding on the wire: png (lossless, as recorded frames and training data) or jpeg (smaller)",
    )  # fmt: skip
    parser.add_argument("--save-dir", type=Path, help="also save each episode as a replayable .npz here")
    parser.add_argument("--quiet", action="store_true", help="no status lines")
    parser.add_argument("--connect-timeout", type=float, default=15.0, help="seconds to wait for the server at start")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m robot_agent", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="drive a robot and stream it to the server")
    _common(run)
    run.add_argument("--robot", choices=["maniskill", "replay"], default="maniskill")
    run.add_argument("--env-id", default="PickCube-v1")
    run.add_argument("--episode-file", type=Path, help="for --robot replay: a .npz written with --save-dir")
    run.add_argument("--policy", choices=POLICIES, default="scripted")
    run.add_argument(
        "--base-policy",
        choices=["hold", "random", "keyboard"],
        default="hold",
        help="what runs under the SpaceMouse when it is idle",
    )
    run.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="",
        help="named ManiSkill setup; rlinf-pickcube: RLinf's PickCube collection (PickCube3View-v1, "
        "pd_joint_delta_pos, 224x224, goal site shown, extra view = 3rd_view_camera)",
    )
    run.add_argument("--width", type=int, default=None, help="frame width (default 128, or the preset's)")
    run.add_argument("--height", type=int, default=None, help="frame height (default 128, or the preset's)")
    run.add_argument("--dead-zone", type=float, default=0.1)
    run.add_argument("--scale", type=float, default=1.0)
    run.add_argument(
        "--stop-after-success",
        type=int,
        default=None,
        metavar="N",
        help="end an episode N steps after the env first reports success",
    )

    replay = sub.add_parser("replay", help="play a stored episode back as if live")
    _common(replay)
    replay.add_argument("--episode-file", type=Path, help=".npz episode; default: a synthetic one")
    replay.add_argument("--synthetic-steps", type=int, default=40)

    sub.add_parser("check", help="print Vulkan, ManiSkill and SpaceMouse availability")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "check":
        return check()
    if not args.token:
        print("error: --token (or RS_AGENT_TOKEN) is required; an admin creates agent tokens", file=sys.stderr)
        return 2
    try:
        return stream(args)
    except RobotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def check() -> int:
    from .spacemouse import spacemouse_status
    from .vulkan import DEFAULT_ICD, ensure_vulkan_icd

    icd = ensure_vulkan_icd()
    if icd and Path(icd.split(":")[0]).is_file():
        print(f"vulkan: ICD {icd}")
    elif icd:
        print(f"vulkan: VK_ICD_FILENAMES={icd} but that file does not exist")
    else:
        print(f"vulkan: no software driver at {DEFAULT_ICD}; run scripts/setup_vulkan.sh (a GPU driver may work too)")
    from importlib import metadata, util

    if util.find_spec("mani_skill") is not None:
        print(f"maniskill: {metadata.version('mani-skill')} importable")
    else:
        print("maniskill: not installed (pip install mani-skill)")
    print(f"spacemouse: {spacemouse_status()}")
    return 0


def make_robot(args: argparse.Namespace) -> Robot:
    if args.command == "replay" or args.robot == "replay":
        from .replay_robot import ReplayRobot, synthetic_episode

        if args.episode_file:
            return ReplayRobot.from_file(args.episode_file)
        return ReplayRobot(synthetic_episode(getattr(args, "synthetic_steps", 40)), env_id="synthetic")
    from .maniskill_robot import JOINT_POS, ManiSkillRobot

    if getattr(args, "preset", ""):
        if args.policy == "scripted":
            raise RobotError(
                f"--policy scripted drives pd_joint_pos; preset {args.preset} uses its own control mode: "
                "use --policy random, keyboard or spacemouse"
            )
        size = {k: v for k, v in (("width", args.width), ("height", args.height)) if v}
        return ManiSkillRobot.from_preset(args.preset, max_episode_steps=args.max_steps, **size)
    mode = JOINT_POS if args.policy == "scripted" else "pd_ee_delta_pose"
    return ManiSkillRobot(
        args.env_id,
        control_mode=mode,
        width=args.width or 128,
        height=args.height or 128,
        max_episode_steps=args.max_steps or 100,
    )


def make_policy(args: argparse.Namespace, robot: Robot) -> Policy:
    from .policies import (
        HoldPolicy,
        KeyboardTeleop,
        RandomPolicy,
        ReplayPolicy,
        ScriptedPickCubePolicy,
        SpaceMouseTeleop,
    )

    name = "replay" if args.command == "replay" else args.policy
    if name == "replay":
        from .replay_robot import ReplayRobot

        if not isinstance(robot, ReplayRobot):
            raise RobotError("--policy replay needs --robot replay (it sends the stored episode's actions)")
        return ReplayPolicy(robot)
    if name == "scripted":
        return ScriptedPickCubePolicy(args.env_id)
    if name == "random":
        return RandomPolicy(robot.action_dim, seed=args.seed)
    if name == "keyboard":
        return KeyboardTeleop()
    if name == "hold":
        return HoldPolicy(robot.action_dim)
    from .spacemouse import SpaceMouseDevice, SpaceMouseMapping, SpaceMouseUnavailable

    try:
        device = SpaceMouseDevice().open()
    except SpaceMouseUnavailable as exc:
        raise RobotError(str(exc)) from None
    base = {"hold": lambda: HoldPolicy(7), "random": lambda: RandomPolicy(7, args.seed), "keyboard": KeyboardTeleop}[
        args.base_policy
    ]()
    mapping = SpaceMouseMapping(dead_zone=args.dead_zone, translation_scale=args.scale, rotation_scale=args.scale / 2)
    return SpaceMouseTeleop(device.read, base=base, mapping=mapping, on_close=device.close)


def stream(args: argparse.Namespace) -> int:
    from .keys import KeyReader
    from .runner import RunConfig, run_episodes
    from .streamer import Streamer, StreamFatal

    robot = make_robot(args)
    if args.max_steps is None:
        args.max_steps = robot.length - 1 if hasattr(robot, "length") else 100
    policy = make_policy(args, robot)  # before connecting: a missing SpaceMouse fails fast
    with robot:
        hello = {
            "project": args.project,
            "deployment": args.deployment,
            "cameras": robot.cameras,
            "hz": args.hz,
            "robot": type(robot).__name__,
            "env_id": robot.env_id,
            "policy": policy.name,
        }
        streamer = Streamer(args.server, args.token, hello)
        try:
            streamer.start(wait_s=args.connect_timeout)
        except StreamFatal as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if not streamer.connected.is_set():
            print("warning: server not reachable yet; steps are queued and the link keeps retrying", file=sys.stderr)
        else:
            print(
                f"session {streamer.session_id}: watch it at {args.server.rstrip('/')}{streamer.dashboard_url or ''}",
                file=sys.stderr,
            )
        keys = KeyReader().start()
        if keys.interactive:
            print("keys: c = success, a = fail (current frame), r = reset episode, Ctrl-C = stop", file=sys.stderr)
        config = RunConfig(
            hz=args.hz,
            episodes=args.episodes,
            max_steps=args.max_steps,
            seed=args.seed,
            image_format=args.format,
            save_dir=args.save_dir,
            stop_on_success_after=getattr(args, "stop_after_success", None),
            quiet=args.quiet,
        )
        try:
            summary = run_episodes(robot, policy, streamer, config, keys)
        except (KeyboardInterrupt, StreamFatal):
            summary = None
        finally:
            keys.stop()
            policy.close()
            streamer.close()
    stats = streamer.stats
    if summary:
        print(
            f"done: {len(summary.episodes)} episodes, {summary.steps} steps at {summary.rate_hz:.1f} Hz, "
            f"{summary.successes} env successes, {summary.labels} labels; results {stats.results}, "
            f"dropped {stats.dropped_server} on the server, {stats.dropped_local} locally",
            file=sys.stderr,
        )
    if streamer.error:
        print(f"error: {streamer.error}", file=sys.stderr)
        return 1
    undelivered = streamer.undelivered_steps()
    if undelivered:
        print(f"error: {undelivered} steps never reached the server (no session was opened in time)", file=sys.stderr)
        return 1
    return 0
