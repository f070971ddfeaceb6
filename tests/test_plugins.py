"""Each extension point takes a toy implementation through the public API alone: an
encoder, a critic family, a policy head for a new kind of action adapter, and a JAX env
source (docs/architecture.md, "Where a new capability plugs in")."""

from __future__ import annotations

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxsac
from jaxsac import connectors, host_loop, networks
from jaxsac.jax_loop import kept_jax_loop
from tests.support import helpers, numpy_sac
from tests.support.helpers import TINY

SMALL = dict(hidden_sizes=(8,), batch_size=5)


@pytest.fixture(autouse=True)
def registries_as_they_were():
    """What a test registers is gone after it: the registries are this process's."""
    saved = [(registry.entries, dict(registry.entries))
             for registry in (networks.ENCODERS, networks.CRITICS, networks.HEADS)]
    saved.append((jaxsac.envs.JAX_ENVS, dict(jaxsac.envs.JAX_ENVS)))
    yield
    for entries, before in saved:
        entries.clear()
        entries.update(before)


def _batch(obs_dim: int, act_dim: int, size: int = 5, seed: int = 0) -> jaxsac.Batch:
    rng = np.random.default_rng(seed)
    return jaxsac.Batch(
        obs=jnp.asarray(rng.normal(size=(size, obs_dim)), jnp.float32),
        action=jnp.asarray(rng.uniform(-1, 1, size=(size, act_dim)), jnp.float32),
        reward=jnp.asarray(rng.normal(size=size), jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(size, obs_dim)), jnp.float32),
        discount=jnp.full((size,), 0.99, jnp.float32), n_step=jnp.ones((size,), jnp.int32),
        weights=jnp.asarray(rng.uniform(0.5, 1.5, size=size), jnp.float32),
        indices=jnp.arange(size, dtype=jnp.int32))


# --- an encoder ----------------------------------------------------------------------


class ToyEncoder(nn.Module):
    """obs tree [B, ...] -> tanh(x W + b) [B, 4], x the flat features [B, obs_dim]."""

    @nn.compact
    def __call__(self, obs):
        return jnp.tanh(nn.Dense(4)(jaxsac.observations.flat_features(obs)))


def test_a_registered_encoder_feeds_the_actor_and_the_critics_and_is_trained():
    seen = []
    networks.register_encoder("toy_tanh", lambda obs_shapes: seen.append(obs_shapes)
                              or ToyEncoder())
    config = jaxsac.SACConfig(encoder="toy_tanh", **SMALL)
    learner = jaxsac.make_learner(config, 3, 1)
    # Each network's factory is given one observation's shapes.
    assert seen == [jax.ShapeDtypeStruct((3,), jnp.float32)] * 2
    state = learner.init(jax.random.key(0))
    actor = state.actor_params["params"]
    assert actor["encoder"]["Dense_0"]["kernel"].shape == (3, 4)
    assert actor["MLP_0"]["Dense_0"]["kernel"].shape == (4, 8)  # the MLP reads features
    critic = state.critic_params["params"]
    assert critic["VmapMLP_0"]["Dense_0"]["kernel"].shape == (2, 4 + 1, 8)

    obs = np.random.default_rng(1).normal(size=(6, 3))
    enc = actor["encoder"]["Dense_0"]
    features = np.tanh(obs @ np.asarray(enc["kernel"], np.float64) + np.asarray(enc["bias"]))
    expected = np.tanh(numpy_sac.actor({"params": actor}, features)[0])
    acted = learner.act(state.actor_params, jnp.asarray(obs, jnp.float32), None,
                        deterministic=True)
    np.testing.assert_allclose(np.asarray(acted), expected, rtol=1e-5, atol=1e-6)

    updated, _, _ = learner.update(state, _batch(3, 1), jax.random.key(1))
    for params, new in ((state.actor_params, updated.actor_params),
                        (state.critic_params, updated.critic_params)):
        assert not np.array_equal(params["params"]["encoder"]["Dense_0"]["kernel"],
                                  new["params"]["encoder"]["Dense_0"]["kernel"])


def test_an_encoder_is_given_the_entries_its_network_reads():
    """With a Dict observation the factory gets each entry's shape and dtype; with
    actor_obs_keys / critic_obs_keys, each network's encoder its own entries only."""
    spec = jaxsac.observations.ObsSpec(("pixels", "privileged", "state"),
                                       ((2, 2, 1), (5,), (3,)), ("uint8", "float32", "float32"))
    seen = []
    networks.register_encoder("toy_tanh", lambda obs_shapes: seen.append(obs_shapes)
                              or ToyEncoder())
    config = jaxsac.SACConfig(encoder="toy_tanh", actor_obs_keys=("state",),
                              critic_obs_keys=("privileged", "pixels"), **SMALL)
    learner = jaxsac.make_learner(config, spec, 1)
    assert seen == [{"state": jax.ShapeDtypeStruct((3,), jnp.float32)},
                    {"pixels": jax.ShapeDtypeStruct((2, 2, 1), jnp.uint8),
                     "privileged": jax.ShapeDtypeStruct((5,), jnp.float32)}]
    state = learner.init(jax.random.key(0))
    assert state.actor_params["params"]["encoder"]["encoder"]["Dense_0"]["kernel"].shape \
        == (3, 4)
    assert state.critic_params["params"]["encoder"]["encoder"]["Dense_0"]["kernel"].shape \
        == (4 + 5, 4)
    # The policy acts on the actor's entry alone.
    obs = {"state": jnp.asarray(np.random.default_rng(2).normal(size=(6, 3)), jnp.float32)}
    enc = state.actor_params["params"]["encoder"]["encoder"]["Dense_0"]
    features = np.tanh(np.asarray(obs["state"], np.float64) @ np.asarray(enc["kernel"])
                       + np.asarray(enc["bias"]))
    expected = np.tanh(numpy_sac.actor(
        {"params": {"MLP_0": state.actor_params["params"]["MLP_0"]}}, features)[0])
    acted = learner.act(state.actor_params, obs, None, deterministic=True)
    np.testing.assert_allclose(np.asarray(acted), expected, rtol=1e-5, atol=1e-6)


def test_an_unregistered_encoder_or_a_bad_factory_is_named():
    with pytest.raises(ValueError, match=r"SACConfig.encoder='nope' is invalid.*'flat'"):
        jaxsac.make_learner(jaxsac.SACConfig(encoder="nope", **SMALL), 3, 1)
    networks.register_encoder("not_a_module", lambda obs_shapes: "conv")
    with pytest.raises(ValueError, match="'not_a_module' returned str"):
        jaxsac.make_learner(jaxsac.SACConfig(encoder="not_a_module", **SMALL), 3, 1)


# --- a critic family -----------------------------------------------------------------


SEEN = []  # the shapes each toy td_target was traced with


class RewardRegression(networks.EnsembleCritic):
    """A toy family: the critics regress the immediate reward (y = r), whatever s'."""

    def td_target(self, reward, discount, next_out, entropy, probs):
        SEEN.append((next_out.shape, entropy.shape, None if probs is None else probs.shape))
        return reward


def test_a_registered_critic_family_sets_the_target_and_the_loss():
    networks.register_critic("reward_regression", lambda settings, num_actions, encoder:
                             RewardRegression(networks.QEnsemble(
                                 settings.num_q, settings.hidden_sizes,
                                 num_actions=num_actions)))
    config = jaxsac.SACConfig(critic="reward_regression", **SMALL)
    SEEN.clear()
    learner = jaxsac.make_learner(config, 3, 2)
    state = learner.init(jax.random.key(0))
    batch = _batch(3, 2)
    params = jaxsac.learner.LossParams(state.actor_params, state.critic_params,
                                       state.log_alpha)
    _, aux = learner.loss(params, state.target_critic_params, batch, jax.random.key(2))

    q = numpy_sac.critics(state.critic_params, np.asarray(batch.obs, np.float64),
                          np.asarray(batch.action, np.float64))  # [N, B], float64
    error = q - np.asarray(batch.reward, np.float64)
    expected = np.mean(np.asarray(batch.weights) * np.sum(0.5 * error**2, axis=0))
    np.testing.assert_allclose(float(aux["qf_loss"]), expected, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(aux["td_error"]), np.abs(error).mean(0), rtol=1e-5)
    assert SEEN == [((2, 5), (5,), None)]  # Q̄ at a' ~ π [N, B], α log π [B], no probs

    # Discrete actions: the family sees every action's values and π to average with.
    discrete = jaxsac.make_learner(config, 3, gymnasium.spaces.Discrete(4))
    state = discrete.init(jax.random.key(0))
    batch = _batch(3, 1)._replace(action=jnp.arange(5, dtype=jnp.int32) % 4)
    params = jaxsac.learner.LossParams(state.actor_params, state.critic_params,
                                       state.log_alpha)
    discrete.loss(params, state.target_critic_params, batch, jax.random.key(2))
    assert SEEN[-1] == ((2, 5, 4), (5, 4), (5, 4))


def test_a_factory_returning_no_critic_family_is_named():
    networks.register_critic("half_a_family", lambda config, num_actions, encoder: object())
    with pytest.raises(ValueError, match="'half_a_family' returned object, which lacks"):
        jaxsac.make_learner(jaxsac.SACConfig(critic="half_a_family", **SMALL), 3, 1)


# --- a policy head for a new kind of action adapter ----------------------------------


@struct.dataclass
class HalfRangeActions:
    """A toy adapter: Box actions in [-1, 1]^dim that the env receives halved."""

    dim: int = struct.field(pytree_node=False, default=2)
    kind = "half_range"
    dtype = np.float32
    host_dtype = np.float32

    @property
    def shape(self):
        return (self.dim,)

    @property
    def columns(self):
        return self.dim

    @property
    def space(self):
        return gymnasium.spaces.Box(-0.5, 0.5, (self.dim,), np.float32)

    def to_env(self, action):
        return 0.5 * action

    def random(self, key, num):
        return jax.random.uniform(key, (num, self.dim), jnp.float32, -1.0, 1.0)

    def from_columns(self, columns):
        return columns

    def metadata(self):
        return {"act_dim": self.dim}


class WideEntropyHead(networks.SquashedGaussianHead):
    """The squashed Gaussian with an "auto" target entropy of −2|A|."""

    def auto_target_entropy(self, scale):
        return -2.0 * self.act_dim


def _wide_entropy_head(actions, settings, critic, encoder):
    return WideEntropyHead(networks.Actor(actions.dim, settings.hidden_sizes), critic,
                           actions.dim)


def test_a_registered_head_serves_its_kind_of_action_adapter():
    actions = HalfRangeActions()
    assert isinstance(actions, connectors.ModuleActions)
    with pytest.raises(ValueError, match=r"policy_head: actions.kind='half_range' is invalid"):
        jaxsac.make_learner(jaxsac.SACConfig(**SMALL), 3, actions)
    networks.register_policy_head("half_range", _wide_entropy_head,
                                  critics_value_every_action=False)
    learner = jaxsac.make_learner(jaxsac.SACConfig(**SMALL), 3, actions)
    state = learner.init(jax.random.key(0))
    params = jaxsac.learner.LossParams(state.actor_params, state.critic_params,
                                       state.log_alpha)
    _, aux = learner.loss(params, state.target_critic_params, _batch(3, 2), jax.random.key(3))
    log_prob = np.asarray(aux["log_prob"], np.float64)
    expected = -np.mean(float(state.log_alpha) * (log_prob - 4.0))  # H̄ = −2·2
    np.testing.assert_allclose(float(aux["alpha_loss"]), expected, rtol=1e-6, atol=1e-7)
    obs = jnp.asarray(np.random.default_rng(4).normal(size=(3, 3)), jnp.float32)
    mode = learner.act(state.actor_params, obs, None, deterministic=True)
    expected_mode = np.tanh(numpy_sac.actor(state.actor_params, np.asarray(obs, np.float64))[0])
    np.testing.assert_allclose(np.asarray(actions.to_env(mode)), 0.5 * expected_mode,
                               rtol=1e-5, atol=1e-6)


# --- a JAX env source ----------------------------------------------------------------


@struct.dataclass
class LineState:
    x: jax.Array


class Line:
    """A toy JAX env: x' = clip(x + a, -2, 2), reward −x'², never terminates."""

    observation_space = gymnasium.spaces.Box(-2.0, 2.0, (1,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, key):
        x = jax.random.uniform(key, (1,), jnp.float32, -1.0, 1.0)
        return LineState(x), x

    def step(self, state, action, key):
        x = jnp.clip(state.x + action, -2.0, 2.0)
        return LineState(x), x, -x[0] ** 2, jnp.bool_(False), jnp.bool_(False)


def test_a_registered_jax_env_trains_in_one_compiled_program():
    jaxsac.envs.register_jax_env("ToyLine-v0", Line, max_episode_steps=20)
    assert jaxsac.envs.resolve_backend("ToyLine-v0") == "jax"
    config = jaxsac.SACConfig(env_id="ToyLine-v0", **{**TINY, "total_env_steps": 400})
    state, metrics = jax.jit(jaxsac.make_train(config))(jax.random.key(0))
    assert metrics["eval_return"].shape == (2,)
    assert np.all(np.isfinite(np.asarray(metrics["eval_return"])))

    # Every stored transition is one the env's own step gives: row t's next observation
    # (row t + 1's, or last_next_obs for the newest) is clip(x + a), its reward −x'².
    buffer = state.buffer
    rows = int(buffer.filled_slots)
    obs, action = np.asarray(buffer.obs)[:rows, 0], np.asarray(buffer.action)[:rows, 0]
    next_obs = np.append(obs[1:], np.asarray(buffer.last_next_obs)[0, 0])
    real = (np.asarray(buffer.flags)[:rows] & jaxsac.replay.state.RESET) == 0
    assert rows == 400 and 0 < (~real).sum() < 40  # reset rows after each time limit
    np.testing.assert_allclose(next_obs[real], np.clip(obs + action, -2.0, 2.0)[real],
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(buffer.reward)[:rows][real], -next_obs[real] ** 2,
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"register_jax_env: env_id='Pendulum-v1' is invalid"):
        jaxsac.envs.register_jax_env("Pendulum-v1", Line, 20)


# --- a host runner -------------------------------------------------------------------


class VectorEnvRunner:
    """A toy HostRunner: gymnasium's own SyncVectorEnv (NEXT_STEP autoreset), no fault
    handling, its episode bookkeeping written here."""

    num_env_restarts = num_env_runner_restarts = 0

    def __init__(self, config: jaxsac.SACConfig):
        self.envs = gymnasium.vector.SyncVectorEnv(
            [lambda: gymnasium.make(config.env_id)] * config.num_envs,
            autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP)
        obs_dim = int(np.prod(self.envs.single_observation_space.shape))
        actions = connectors.module_actions(self.envs.single_action_space)
        self.rows = jaxsac.runners.PackedRows(obs_dim, actions)
        self.num_envs = config.num_envs
        self.acting = host_loop.acting_functions(config, obs_dim, actions)
        self.raw_obs = self.envs.reset(seed=config.seed)[0].astype(np.float32)
        self.returns, self.lengths = np.zeros(self.num_envs), np.zeros(self.num_envs)
        self.done = np.zeros(self.num_envs, bool)
        self.stepped = []  # (obs, action, reward, next_obs) of every real env step

    def sample(self, acting, actor_params, obs_stats, root, iteration, size):
        rows = []
        for i in range(size):
            action = np.asarray(self.acting[acting](actor_params, obs_stats, self.raw_obs,
                                                    root, iteration + i))
            obs, reward, terminated, truncated, _ = self.envs.step(
                self.rows.actions.to_env(action))
            obs, reward = obs.astype(np.float32), reward.astype(np.float32)
            reset_row = self.done
            self.returns = np.where(reset_row, 0.0, self.returns + reward)
            self.lengths = np.where(reset_row, 0, self.lengths + 1)
            self.done = terminated | truncated
            for e in np.flatnonzero(~reset_row):
                self.stepped.append((self.raw_obs[e], action[e], reward[e], obs[e]))
            episodes = jaxsac.EpisodeInfo(done=self.done,
                                          episode_return=np.where(self.done, self.returns, 0),
                                          episode_length=np.where(self.done, self.lengths, 0))
            rows.append(self.rows.pack(self.raw_obs, action, reward, terminated, truncated,
                                       obs, episodes, np.zeros(self.num_envs, bool)))
            self.raw_obs = obs
        return np.stack(rows)

    def resume_from(self, obs):
        raise NotImplementedError("the toy runner does not resume")

    def close(self):
        self.envs.close()


def test_a_host_runner_of_its_own_drives_the_gymnasium_loop():
    """The loop takes a runner written here as it takes its own: the same config and
    seed give the same bits as the built-in EnvRunner, and every stored step is one the
    toy runner's envs produced."""
    config = jaxsac.SACConfig(backend="gymnasium", num_envs=2,
                              **{**TINY, "total_env_steps": 400, "log_every": 200})
    toy = VectorEnvRunner(config)
    assert isinstance(toy, jaxsac.runners.HostRunner)
    loop = host_loop.HostLoop(config, toy)
    state, rows = loop.run_chunk(loop.init(jax.random.key(0)), 0, 2)
    built_in = host_loop.HostLoop(config, host_loop.host_runner(config))
    expected, expected_rows = built_in.run_chunk(built_in.init(jax.random.key(0)), 0, 2)
    assert helpers.leaves_equal(state, expected)
    np.testing.assert_array_equal(rows["episode_return_mean"],
                                  expected_rows["episode_return_mean"])

    stepped = {tuple(np.concatenate([o, a, [r], n])) for o, a, r, n in toy.stepped}
    buffer = state.buffer
    flags, count = np.asarray(buffer.flags), int(buffer.filled_slots) * config.num_envs
    next_rows = np.concatenate([np.asarray(buffer.obs)[config.num_envs:count],
                                np.asarray(buffer.last_next_obs)])
    for row in np.flatnonzero((flags[:count] & jaxsac.replay.state.RESET) == 0):
        stored = np.concatenate([buffer.obs[row], buffer.action[row], [buffer.reward[row]],
                                 next_rows[row]])
        assert tuple(np.asarray(stored, np.float32)) in stepped
    with pytest.raises(ValueError, match="HostLoop: runner=object is invalid"):
        host_loop.HostLoop(config, object())


def test_runs_with_registered_code_are_never_kept():
    """A registered name can be registered again with other code: such a run's programs
    are built afresh, while jaxsac's own are kept for the next call."""
    mesh = jaxsac.sharding.default_mesh(jaxsac.SACConfig())
    own = jaxsac.SACConfig(**SMALL)
    assert kept_jax_loop(own, 1, mesh) is kept_jax_loop(own.replace(seed=3), 1, mesh)
    networks.register_encoder("toy_tanh", lambda obs_shapes: ToyEncoder())
    plugged = own.replace(encoder="toy_tanh")
    first = kept_jax_loop(plugged, 1, mesh)
    assert first is not kept_jax_loop(plugged, 1, mesh) and first._period.description is None
