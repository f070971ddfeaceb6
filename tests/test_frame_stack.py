"""Frame stacks: the replay buffer's stacks (built at sample time from frames stored
once) and the runners' acting stacks, against a brute-force NumPy reference built from
the raw step stream: for step i of an env, the frames of its episode up to i (the
episode starts after a reset row), the last k of them, the first repeated in front."""

from __future__ import annotations

import shutil

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsac
from jaxsac import checkpoint, memory
from jaxsac.assembly import assemble, init_state
from jaxsac.frames import FrameStack
from jaxsac.observations import ObsSpec, obs_spec
from jaxsac.replay import episode_buffer
from jaxsac.replay.state import NOT_A_START
from jaxsac.runners import GymRunner, make_jax_runner
from jaxsac.types import Step
from tests.support import helpers, image_envs

FRAME = (3, 2, 2)  # H, W, C of the tiny test images


# ----------------------------------------------------------------- image observations


def test_an_image_box_stays_an_image_and_packs_exactly():
    spec = obs_spec(gymnasium.spaces.Box(0, 255, FRAME, np.uint8))
    assert spec == ObsSpec.image(FRAME) and spec.is_image_array and spec.dim == 12
    assert ObsSpec.from_metadata(spec.metadata()) == spec
    assert spec.stacked(3) == ObsSpec.image((3, 2, 6))
    # Other Boxes stay flat float32 (a float image, a uint8 of another rank).
    assert obs_spec(gymnasium.spaces.Box(0, 1, FRAME, np.float32)) == ObsSpec.flat(12)
    assert obs_spec(gymnasium.spaces.Box(0, 255, (4, 5), np.uint8)) == ObsSpec.flat(20)
    every_value = np.arange(256 * 12).reshape(-1, *FRAME) % 256  # each value 12 times
    images = spec.from_env(every_value.astype(np.int64))
    assert images.dtype == np.uint8 and images.shape == every_value.shape
    packed = spec.pack(images)
    assert packed.dtype == np.float32 and packed.shape == (len(images), 12)
    np.testing.assert_array_equal(spec.unpack(packed), images)
    np.testing.assert_array_equal(spec.unpack(jnp.asarray(packed)), images)
    # Normalization tracks no image and leaves it as it is; the module sees uint8.
    to_module = jaxsac.connectors.EnvToModule(normalize=True)
    stats = to_module.update(to_module.init(spec), images)
    module_obs = to_module.apply(stats, images)
    assert module_obs.dtype == jnp.uint8
    np.testing.assert_array_equal(module_obs, images)
    np.testing.assert_array_equal(jaxsac.observations.flat_features(images),
                                  images.reshape(len(images), -1).astype(np.float32))


# ----------------------------------------------------------------- the reference


def make_stream(seed, num_envs, num_adds, p_done, p_failed, as_dict):
    """A NEXT_STEP stream of `num_adds` Steps [num_envs] with image observations (random
    uint8 frames; with `as_dict`, {"pixels": frame, "state": [2] float32}), and per env
    the list of its rows as dicts (obs, next_obs, reset: a reset row, failed). After a
    done step comes the reset row (obs = final obs, next_obs = the new first obs); a
    failed step (as the gymnasium runner reports it) is obs = next_obs = the last obs,
    truncated, then a reset row."""
    rng = np.random.default_rng(seed)

    def new_obs():
        frame = rng.integers(0, 256, FRAME, dtype=np.uint8)
        return {"pixels": frame, "state": rng.normal(size=2).astype(np.float32)} \
            if as_dict else frame

    current = [new_obs() for _ in range(num_envs)]
    pending = [False] * num_envs
    per_env = [[] for _ in range(num_envs)]
    steps = []
    for _ in range(num_adds):
        rows = []
        for env in range(num_envs):
            obs = current[env]
            failed = term = trunc = False
            if pending[env]:
                next_obs, reset = new_obs(), True
            elif rng.random() < p_failed:
                next_obs, reset, failed, trunc = obs, False, True, True
            else:
                next_obs, reset = new_obs(), False
                term, trunc = rng.random() < p_done / 2, rng.random() < p_done / 2
            per_env[env].append(dict(obs=obs, next_obs=next_obs, reset=reset, failed=failed))
            rows.append((obs, term, trunc, next_obs, failed))
            current[env], pending[env] = next_obs, term or trunc
        obs, term, trunc, next_obs, failed = (
            jax.tree.map(lambda *x: np.stack(x), *field) for field in zip(*rows, strict=True))
        steps.append(Step(obs=obs, action=np.zeros((num_envs, 1), np.float32),
                          reward=np.zeros(num_envs, np.float32), terminated=term,
                          truncated=trunc, next_obs=next_obs, failed=failed))
    return steps, per_env


def episode_start(rows, i):
    """The first step of step i's episode: the step after the last reset row before i."""
    while i > 0 and not rows[i - 1]["reset"]:
        i -= 1
    return i


def reference_stack(frames, k):
    """The last k of `frames`, the first repeated in front when fewer, along channels."""
    frames = [frames[0]] * max(0, k - len(frames)) + frames[-k:]
    return np.concatenate(frames, axis=-1)


def image_of(obs):
    return obs["pixels"] if isinstance(obs, dict) else obs


def obs_stack(rows, i, k):
    """The stack the policy saw at step i."""
    return reference_stack([image_of(r["obs"]) for r in rows[episode_start(rows, i):i + 1]], k)


def next_obs_stack(rows, i, n, k):
    """The stack of the observation after step i + n - 1 (a transition's next obs)."""
    last = i + n - 1
    frames = [image_of(r["obs"]) for r in rows[episode_start(rows, i):last + 1]]
    return reference_stack(frames + [image_of(rows[last]["next_obs"])], k)


def valid_starts(per_env, num_adds, ring, k):
    """{(env, step)}: stored steps that are transitions' starts (not reset or failed
    rows) whose whole stack is still stored."""
    oldest = max(0, num_adds - ring)
    return {(env, i) for env, rows in enumerate(per_env) for i in range(oldest, num_adds)
            if not rows[i]["reset"] and not rows[i]["failed"]
            and max(episode_start(rows, i), i - k + 1) >= oldest}


# ----------------------------------------------------------------- the buffer


def step_of_row(row, num_envs, ring, num_adds):
    """(env, step index) stored at flat row `row` after `num_adds` adds."""
    env, slot = row % num_envs, row // num_envs
    last = num_adds - 1
    return env, last - (last - slot) % ring


@pytest.mark.parametrize("prioritized,n_step,as_dict", [
    (False, 1, False), (False, (1, 4), True), (True, 3, False), (True, (2, 3), True)])
def test_buffer_stacks_match_the_stream(prioritized, n_step, as_dict):
    num_envs, ring, k, num_adds = 2, 9, 3, 40
    steps, per_env = make_stream(len(str(n_step)) + prioritized, num_envs, num_adds,
                                 p_done=0.25, p_failed=0.04, as_dict=as_dict)
    buf = episode_buffer(ring * num_envs, num_envs, 256, n_step=n_step,
                         prioritized=prioritized, frame_stack=k)
    state = buf.init(jax.tree.map(lambda x: x[0], steps[0]))
    add = jax.jit(buf.add)
    for t, step in enumerate(steps):
        state = add(state, step)
        # After every add (the ring wraps four times): the valid starts are the steps
        # whose stacks are stored, in the flags, the count and the priorities.
        flags = np.asarray(state.flags)
        written = min(t + 1, ring) * num_envs
        valid = {step_of_row(r, num_envs, ring, t + 1) for r in range(written)
                 if not flags[r] & NOT_A_START}
        assert valid == valid_starts([rows[:t + 1] for rows in per_env], t + 1, ring, k)
        assert int(state.num_valid) == len(valid)
        if prioritized:
            leaves = np.asarray(state.priority_sums[0]).reshape(-1)[:ring * num_envs]  # by row
            assert {step_of_row(r, num_envs, ring, t + 1)
                    for r in np.flatnonzero(leaves > 0)} == valid

    sample = jax.jit(buf.sample)
    seen = set()
    for key in range(3):
        batch = jax.device_get(sample(state, jax.random.key(key)))
        obs, next_obs = image_of(batch.obs), image_of(batch.next_obs)
        assert obs.dtype == np.uint8 and obs.shape == (256, *FRAME[:2], FRAME[2] * k)
        for b, row in enumerate(batch.indices):
            env, i = step_of_row(int(row), num_envs, ring, num_adds)
            rows = per_env[env]
            n = int(batch.n_step[b])
            seen.add((env, i))
            np.testing.assert_array_equal(obs[b], obs_stack(rows, i, k))
            np.testing.assert_array_equal(next_obs[b], next_obs_stack(rows, i, n, k))
            if as_dict:  # vector entries are not stacked: the step's own
                np.testing.assert_array_equal(batch.obs["state"][b], rows[i]["obs"]["state"])
                np.testing.assert_array_equal(batch.next_obs["state"][b],
                                              rows[i + n - 1]["next_obs"]["state"])
        if prioritized:
            state = buf.update_priorities(state, batch.indices,
                                          jnp.asarray(np.arange(256) % 7, jnp.float32))
    valid = valid_starts(per_env, num_adds, ring, k)
    assert seen <= valid
    if not prioritized:  # 768 uniform draws reach every valid start
        assert seen == valid


def test_frame_stack_errors():
    with pytest.raises(ValueError, match=r"frame_stack=0 .*integer in \[1, "):
        episode_buffer(8, 1, 4, frame_stack=0)
    with pytest.raises(ValueError, match=r"frame_stack=5 .*capacity // num_envs = 4"):
        episode_buffer(8, 2, 4, frame_stack=5)
    flat = Step(np.zeros(3, np.float32), np.zeros(1, np.float32), np.float32(0), False,
                False, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"frame_stack=2 .*must be 1 when no observation"):
        episode_buffer(8, 1, 4, frame_stack=2).init(flat)
    with pytest.raises(ValueError, match=r"SACConfig.frame_stack=0 .*integer >= 1"):
        jaxsac.SACConfig(frame_stack=0)
    with pytest.raises(ValueError, match=r"SACConfig.frame_stack=4 .*1 for the observation "
                                         r"flat \[3\], which has no image"):
        jaxsac.make_train(jaxsac.SACConfig(env_id="Pendulum-v1", frame_stack=4))
    with pytest.raises(ValueError, match=r"FrameStack: frame_stack=2 .*no image"):
        FrameStack(ObsSpec.flat(3), 2)


# ----------------------------------------------------------------- the runners


def stream_rows(steps):
    """Per env, the rows of Steps [T, E] (numpy) as `obs_stack` reads them: a row is a
    reset row when its env's previous row ended an episode."""
    obs, done = np.asarray(steps.obs), np.asarray(steps.terminated | steps.truncated)
    return [[dict(obs=obs[t, e], next_obs=np.asarray(steps.next_obs)[t, e],
                  reset=t > 0 and bool(done[t - 1, e])) for t in range(len(obs))]
            for e in range(obs.shape[1])]


def jax_runner_stream(num_envs, k, num_steps):
    """(acting stacks [T, E, ...] before each step, Steps [T, E]) of the JAX runner."""
    runner = make_jax_runner(jaxsac.envs.make(image_envs.JAX_ID), num_envs, frame_stack=k)
    step = jax.jit(lambda rstate, key: runner.step(
        rstate, lambda obs, _: image_envs.action_of(obs), key))
    rstate = runner.init(jax.random.key(0))
    stacks, steps = [], []
    for t in range(num_steps):
        stacks.append(np.asarray(rstate.frames))
        rstate, transition, _ = step(rstate, jax.random.key(t))
        steps.append(jax.device_get(transition))
    return np.stack(stacks), jax.tree.map(lambda *x: np.stack(x), *steps)


def gym_runner_stream(num_envs, k, num_steps):
    """The same from the gymnasium runner (acting stacks unpacked from `acting_obs`)."""
    with GymRunner(image_envs.GYM_ID, num_envs, frame_stack=k) as runner:
        stacked = runner.frames.stacked_spec
        stacks, rows = [], []
        for _ in range(num_steps):
            stack = stacked.unpack(runner.acting_obs)
            stacks.append(stack)
            rows.append(runner.step_packed(image_envs.action_of(stack)))
        return np.stack(stacks), runner.unpack(np.stack(rows))[0]


def test_runners_act_on_the_episodes_last_frames():
    image_envs.register()
    num_envs, k, num_steps = 2, 3, 20
    jax_stacks, jax_steps = jax_runner_stream(num_envs, k, num_steps)
    gym_stacks, gym_steps = gym_runner_stream(num_envs, k, num_steps)
    # The same env and actions from the stacks: the same stream, bit for bit.
    np.testing.assert_array_equal(jax_steps.obs, gym_steps.obs)
    np.testing.assert_array_equal(jax_steps.terminated | jax_steps.truncated,
                                  gym_steps.terminated | gym_steps.truncated)
    np.testing.assert_array_equal(jax_stacks, gym_stacks)
    per_env = stream_rows(jax_steps)
    assert sum(r["reset"] for r in per_env[0]) >= 2  # several episodes
    for env, rows in enumerate(per_env):
        for t in range(num_steps):
            np.testing.assert_array_equal(jax_stacks[t, env], obs_stack(rows, t, k),
                                          err_msg=f"env {env} step {t}")


def test_gym_runner_stacks_restart_after_resume_from():
    # A resumed gymnasium run (its envs restarted) emits reset rows from the stored
    # last observations; the stacks then start from the envs' current observations.
    image_envs.register()
    k, num_steps, resume_at = 3, 12, 5
    with GymRunner(image_envs.GYM_ID, 1, frame_stack=k) as runner:
        stacked = runner.frames.stacked_spec
        stacks, rows = [], []
        for t in range(num_steps):
            if t == resume_at:
                runner.resume_from(np.full((1, runner.obs_dim), 9, np.float32))
            stack = stacked.unpack(runner.acting_obs)
            stacks.append(stack[0])
            rows.append(runner.step_packed(image_envs.action_of(stack)))
        steps = runner.unpack(np.stack(rows))[0]
    [per_env] = stream_rows(steps)
    assert (per_env[resume_at]["obs"] == 9).all()
    per_env[resume_at]["reset"] = True  # the buffer ends the episode before it
    # At the reset row itself the envs have restarted already: its action is ignored.
    for t in set(range(num_steps)) - {resume_at}:
        np.testing.assert_array_equal(stacks[t], obs_stack(per_env, t, k), err_msg=f"{t}")
    np.testing.assert_array_equal(stacks[resume_at + 1], np.concatenate(
        [per_env[resume_at + 1]["obs"]] * k, axis=-1))


# ----------------------------------------------------------------- a whole image run


def pixel_config(directory, **changes):
    return jaxsac.SACConfig(**{**dict(
        env_id="PendulumPixels-v1", env_kwargs={"size": 8}, frame_stack=3, num_envs=2,
        total_env_steps=400, learning_starts=100, log_every=100, checkpoint_every=200,
        buffer_capacity=240, batch_size=16, hidden_sizes=(16,), eval_episodes=1,
        conv_channels=(4,), conv_strides=(2,), encoder_features=8,
        checkpoint_dir=directory and str(directory), max_to_keep=5), **changes})


def test_image_run_saves_restores_and_resumes_bit_for_bit(tmp_path):
    # 200 iterations of 2 envs overwrite each env's ring of 120 rows: stacks are cut.
    full = jaxsac.train(pixel_config(tmp_path / "full")).state
    assert full.buffer.obs.shape == (240, 8, 8, 3) and full.buffer.obs.dtype == np.uint8
    assert full.runner.frames.shape == (2, 8, 8, 9) and full.runner.frames.dtype == np.uint8
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    shutil.copytree(tmp_path / "full" / "200", interrupted / "200")
    resumed = jaxsac.train(pixel_config(interrupted, resume=True)).state
    assert helpers.leaves_equal(resumed, full)
    restored, _ = checkpoint.restore(tmp_path / "full", 400)
    assert helpers.leaves_equal(restored, full)

    # The policy of the checkpoint reads [8, 8, 9] stacks; acting through an episode on
    # the env's frames equals acting on the brute-force stacks.
    policy = jaxsac.load_policy(tmp_path / "full")
    assert policy.acting_spec == ObsSpec.image((8, 8, 9))
    env = jaxsac.envs.make("PendulumPixels-v1", size=8)
    state, obs = env.reset(jax.random.key(3))
    act, frames = policy.episode(), []
    for _ in range(5):
        frames.append(np.asarray(obs))
        action = act(np.asarray(obs))
        np.testing.assert_array_equal(action, policy(reference_stack(frames, 3)))
        state, obs = env.step(state, jnp.asarray(action), jax.random.key(0))[:2]
    with pytest.raises(ValueError, match=r"obs of shape \(8, 8, 3\); expected \(8, 8, 9\)"):
        policy(frames[0])


def test_memory_counts_each_frame_once():
    config = pixel_config(None, buffer_capacity=1000, checkpoint_every=0)
    shapes = jax.eval_shape(lambda k: init_state(assemble(config), k), jax.random.key(0))
    frames = 1000 * 8 * 8 * 3  # bytes: one uint8 frame per stored step, not k
    assert shapes.buffer.obs.dtype == np.uint8
    assert frames <= memory.tree_bytes(shapes.buffer) < frames + 1000 * 64


def test_a_frame_stack_without_an_image_is_refused_before_the_run():
    for backend in ("jax", "gymnasium"):
        config = jaxsac.SACConfig(env_id="Pendulum-v1", backend=backend, frame_stack=3)
        with pytest.raises(ValueError, match=r"SACConfig.frame_stack=3 is invalid: must be 1 "
                                             r"for the observation flat \[3\], which has no"):
            jaxsac.train(config)
