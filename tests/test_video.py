"""Videos of a policy: the CLI's `--video` after a brief Pendulum run (gymnasium's
renderer) and a MuJoCo Playground CartpoleBalance policy (MuJoCo's renderer through
EGL), read back from the MP4 with imageio."""

from __future__ import annotations

import re
from types import SimpleNamespace

import gymnasium
import imageio.v2 as imageio
import jax
import numpy as np
import pytest

import jaxsac
from experiments import train as cli
from jaxsac.assembly import assemble
from jaxsac.learner import Hyperparams
from tests.support.helpers import TINY


def read_frames(path) -> np.ndarray:
    """[T, H, W, 3] uint8: every frame of the video at `path` (read one by one: the
    reader's length is unknown, inf, which list() would preallocate)."""
    frames = []
    for frame in imageio.get_reader(str(path), format="ffmpeg"):
        frames.append(frame)
    return np.stack(frames)


def assert_not_blank(frames: np.ndarray) -> None:
    """Every frame has content (not one flat colour), and the picture moves."""
    assert frames.dtype == np.uint8
    assert all(frame.std() > 5.0 for frame in frames)
    moved = np.abs(frames[0].astype(int) - frames[-1].astype(int)).max(axis=-1) > 40
    assert moved.sum() >= 50  # pixels that changed by more than the codec's noise


def test_the_cli_writes_the_final_pendulum_policy_beside_the_curve(tmp_path):
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in TINY.items()
             if name != "hidden_sizes"]
    result = cli.main([*flags, "--hidden-sizes", "32", "32", "--log-dir", str(tmp_path),
                       "--video", "--no-progress", "--no-compilation-cache"])
    assert (tmp_path / "curve.png").exists()
    frames = read_frames(tmp_path / "policy.mp4")
    assert frames.shape == (201, 500, 500, 3)  # the first observation and 200 steps
    assert_not_blank(frames)
    # The video's episode is the deterministic policy's on gymnasium's Pendulum, seed 0.
    policy = jaxsac.Policy.from_state(result.config, result.state)
    env = gymnasium.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        total += reward
        done = terminated or truncated
    video = jaxsac.record_video(policy, tmp_path / "again.mp4", max_steps=5, fps=10)
    assert video.num_frames == 6 and read_frames(video.path).shape == (6, 500, 500, 3)
    full = jaxsac.record_video(policy, tmp_path / "full.mp4")
    np.testing.assert_allclose(full.episode_return, total, rtol=1e-6)


def test_video_needs_a_log_dir_on_the_command_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--video", "--no-progress"])
    assert exit_info.value.code == 2
    assert re.search("--video writes log_dir/policy.mp4 .* set --log-dir", capsys.readouterr().err)


def test_a_playground_cartpole_balance_policy_is_rendered_by_mujoco(tmp_path):
    config = jaxsac.tuned("playground/CartpoleBalance", num_envs=1, hidden_sizes=(8,),
                          buffer_capacity=64, batch_size=8, learning_starts=8, log_every=8,
                          total_env_steps=16)
    assembly = assemble(config)
    # An untrained actor, as a run starts (the whole initial state would run the
    # Playground reset op by op: a minute on a CPU).
    learner = assembly.learner.init(jax.random.key(0), Hyperparams.from_config(config))
    start = SimpleNamespace(iteration=np.int32(0), learner=learner, runner=SimpleNamespace(
        obs_norm=assembly.env_to_module.init(assembly.obs_dim)))
    policy = jaxsac.Policy.from_state(config, start)
    video = jaxsac.record_video(policy, tmp_path / "cartpole.mp4", max_steps=40)
    assert video.num_frames == 41 and np.isfinite(video.episode_return)
    frames = read_frames(video.path)
    assert frames.shape == (41, 240, 320, 3)
    assert_not_blank(frames)


def test_an_env_without_a_renderer_is_named():
    with pytest.raises(ValueError, match=r"record_video: env_id='MultiAgentPendulum-v1' is "
                       r"invalid: must be a gymnasium id"):
        jaxsac.record_video(lambda obs: obs, "x.mp4", env_id="MultiAgentPendulum-v1")
