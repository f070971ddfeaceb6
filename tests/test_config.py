"""SACConfig: defaults, validation messages, hashing and dict/JSON round trips."""

from __future__ import annotations

import dataclasses

import jax
import pytest

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
    ("priority_beta_final", 1.0), ("log_dir", ""),
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
