"""SACConfig: defaults, validation messages, hashing and dict/JSON round trips."""

from __future__ import annotations

import dataclasses

import jax
import pytest

from jaxsac import config as config_module
from jaxsac.assembly import assemble, init_state
from jaxsac.config import SACConfig

BAD_VALUES = [
    ("actor_lr", -1e-3), ("critic_lr", 0.0), ("alpha_lr", float("nan")),
    ("tau", 0.0), ("tau", 1.5), ("gamma", -0.1), ("gamma", 1.01),
    ("batch_size", 0), ("num_envs", 0), ("num_q", 0), ("initial_alpha", 0.0),
    ("n_step", 0), ("n_step", (3, 2)), ("n_step", (0, 2)), ("n_step", (1, 2, 3)),
    ("critic_loss", "l1"), ("activation", "sigmoidish"), ("backend", "torch"),
    ("vectorization", "threads"), ("utd_ratio", 0.0), ("target_network_update_freq", 0),
    ("buffer_capacity", 0), ("priority_alpha", -0.5), ("priority_beta", 1.2),
    ("priority_eps", 0.0), ("hidden_sizes", ()), ("hidden_sizes", (64, 0)),
    ("target_entropy", "high"), ("grad_clip", -1.0), ("learning_starts", -1),
    ("total_env_steps", -5), ("log_every", 0), ("env_id", ""), ("batch_size", 2.5),
    ("seed", True),
    # Values that used to change a run silently or fail without naming the field:
    ("learn_alpha", "False"), ("normalize_obs", 1), ("prioritized", "yes"),
    ("checkpoint_buffer", None), ("resume", "True"), ("gamma", "0.99"), ("tau", "0.1"),
    ("num_envs", "4"), ("total_env_steps", "1000"), ("seed", 2**32), ("seed", 2**40),
    ("total_env_steps", 0), ("learning_starts", 100_000), ("learning_starts", 200_000),
    ("checkpoint_dir", ""), ("resume", True), ("checkpoint_every", 1_000),
    ("priority_beta_final", 1.0), ("log_dir", ""), ("keep_best", True), ("keep_best", 1),
]


def test_defaults_are_the_reference_defaults():
    c = SACConfig()
    assert (c.gamma, c.tau, c.batch_size, c.buffer_capacity, c.learning_starts) == (
        0.99, 0.005, 256, 1_000_000, 1_500)
    assert (c.actor_lr, c.critic_lr, c.alpha_lr, c.initial_alpha) == (3e-4, 3e-4, 3e-4, 1.0)
    assert (c.target_entropy, c.n_step, c.num_q, c.utd_ratio) == ("auto", 1, 2, 1.0)
    assert (c.target_network_update_freq, c.hidden_sizes, c.prioritized) == (1, (256, 256), False)
    assert (c.priority_alpha, c.priority_beta, c.priority_eps) == (0.6, 0.4, 1e-6)


@pytest.mark.parametrize(("field", "value"), BAD_VALUES)
def test_bad_value_names_field_and_value(field, value):
    with pytest.raises(ValueError) as err:
        SACConfig(**{field: value})
    message = str(err.value)
    assert f"SACConfig.{field}=" in message and "must be" in message
    assert repr(value) in message or str(value) in message


def test_numpy_scalars_become_python_numbers():
    import numpy as np

    config = SACConfig(num_envs=np.int64(2), gamma=np.float32(0.5), seed=np.uint32(7))
    assert type(config.num_envs) is int and type(config.gamma) is float
    assert config.to_json() == SACConfig(num_envs=2, gamma=0.5, seed=7).to_json()


def test_capacity_must_split_evenly_over_envs():
    with pytest.raises(ValueError, match=r"buffer_capacity=1001.*multiple of num_envs=4"):
        SACConfig(num_envs=4, buffer_capacity=1001)
    with pytest.raises(ValueError, match="buffer_capacity=2"):
        SACConfig(num_envs=4, buffer_capacity=2)


def test_hashable_and_usable_as_static_jit_argument():
    calls = []

    def scaled(config, x):
        calls.append(1)
        return x * config.gamma

    f = jax.jit(scaled, static_argnums=0)
    f(SACConfig(), 1.0)
    f(SACConfig(), 2.0)
    f(SACConfig(gamma=0.5), 1.0)
    assert len(calls) == 2  # equal configs hash equal; a different one retraces
    assert hash(SACConfig(n_step=(2, 4))) == hash(SACConfig(n_step=[2, 4]))


def test_round_trips_through_dict_and_json():
    c = SACConfig(env_id="HalfCheetah-v5", n_step=(1, 5), hidden_sizes=(64, 64, 32),
                  target_entropy=-3.0, grad_clip=40.0, prioritized=True)
    assert SACConfig.from_dict(c.to_dict()) == c
    assert SACConfig.from_json(c.to_json()) == c
    assert isinstance(SACConfig.from_json(c.to_json()).n_step, tuple)


def test_unknown_fields_are_rejected_by_name():
    with pytest.raises(ValueError, match="unknown field.*'learning_rate'"):
        SACConfig.from_dict({"learning_rate": 1e-3})


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SACConfig().gamma = 0.5  # type: ignore[misc]


def test_n_step_range():
    assert SACConfig(n_step=3).n_step_range == (3, 3)
    assert SACConfig(n_step=(2, 4)).n_step_range == (2, 4)


@pytest.mark.parametrize("changes, message", [
    ({"target_entropy_scale": 1.0}, r"target_entropy_scale=1.0 is invalid: must be None or "
                                    r"a number in \(0, 1\)"),
    ({"target_entropy_scale": 0.0}, r"target_entropy_scale=0.0 is invalid"),
    ({"target_entropy_scale": 0.5, "target_entropy": -1.0},
     r"target_entropy_scale=0.5 is invalid: must be None with an explicit target_entropy"),
    ({"log_std_bounds": (2.0, -5.0)}, r"log_std_bounds=\(2.0, -5.0\) is invalid: must be "
                                      r"None or a pair \(min, max\)"),
    ({"log_std_bounds": (-5.0,)}, r"log_std_bounds=\(-5.0,\) is invalid"),
])
def test_action_kind_settings_are_validated(changes, message):
    with pytest.raises(ValueError, match=message):
        SACConfig(**changes)


def test_every_field_declares_its_part_and_roles():
    """The lists other modules derive (structural, sweepable, counted in env steps, ...)
    come from these declarations: a field without them would be left out of all."""
    for field in dataclasses.fields(SACConfig):
        assert set(field.metadata) == {"part", "roles", "check"}, field.name
        assert field.metadata["part"] in config_module.PARTS, field.name
        assert set(field.metadata["roles"]) <= set(config_module.ROLES), field.name
    assert config_module.fields_with(config_module.SWEEPABLE) == (
        "gamma", "actor_lr", "critic_lr", "alpha_lr", "tau", "initial_alpha")
    with pytest.raises(ValueError, match=r"fields_with: role='shape' is invalid"):
        config_module.fields_with("shape")


# A value other than the default for each field that can take one in a tiny Pendulum run.
ALTERNATIVES = {
    "num_envs": 2, "hidden_sizes": (8,), "num_q": 3, "buffer_capacity": 1_024,
    "prioritized": True, "normalize_obs": True, "prng_impl": "philox4x32",
    "batch_size": 16, "n_step": 3, "gamma": 0.9, "tau": 0.1, "actor_lr": 1e-3,
    "critic_lr": 1e-3, "alpha_lr": 1e-3, "initial_alpha": 0.5, "learn_alpha": False,
    "utd_ratio": 2.0, "critic_layer_norm": True, "activation": "tanh", "seed": 3,
    "learning_starts": 64, "log_every": 256, "total_env_steps": 1_024,
    "target_network_update_freq": 2, "critic_loss": "huber", "grad_clip": 1.0,
    "priority_alpha": 0.5, "eval_episodes": 2, "action_noise_exponent": 1.0,
}


def _state_shapes(config: SACConfig):
    assembly = assemble(config)
    state = jax.eval_shape(lambda key: init_state(assembly, key), jax.random.key(0))
    return [(jax.tree_util.keystr(path), leaf.shape, leaf.dtype)
            for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]]


def test_fields_that_change_the_state_s_arrays_are_structural():
    """Each field changed alone: when the initial TrainState's leaves change in name,
    shape or dtype, a checkpoint of one cannot restore into the other, so the field must
    be STRUCTURAL. Two fields are left to the checkpoint's comparison of the arrays, which
    names the leaves that differ: critic_layer_norm and grad_clip add leaves when turned
    on, but their values may change on resume (a clip of 1.0 continued with 2.0)."""
    base = SACConfig(hidden_sizes=(4,), buffer_capacity=512, batch_size=8,
                     learning_starts=32, log_every=128, total_env_steps=512)
    before = _state_shapes(base)
    structural = set(config_module.fields_with(config_module.STRUCTURAL))
    changed = {name for name, value in ALTERNATIVES.items()
               if _state_shapes(base.replace(**{name: value})) != before}
    assert {"num_envs", "hidden_sizes", "num_q", "buffer_capacity", "prioritized"} <= changed
    assert changed - structural == {"critic_layer_norm", "grad_clip"}
