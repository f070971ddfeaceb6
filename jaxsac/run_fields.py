"""The checks across SACConfig's run, checkpoint, sharding, replay and exploration fields
(`check_run_fields`, called by SACConfig's validation after each field's own check and
the runners' fields' (`runner_fields`: how num_envs divides among runners comes first),
before the learner's (`learner_fields`)."""

from __future__ import annotations

from typing import Any

from jaxsac import checks


def check_run_fields(c: Any) -> None:
    """Raise the ValueError of jaxsac.checks for the first setting of the SACConfig `c`
    that its other fields rule out."""
    owner = "SACConfig"
    if c.learning_starts >= c.total_env_steps:
        checks.fail(owner, "learning_starts", c.learning_starts,
                    f"below total_env_steps={c.total_env_steps} (else the run takes no "
                    "gradient step)")
    if c.checkpoint_dir is None:
        if c.resume:
            checks.fail(owner, "resume", c.resume, "False without a checkpoint_dir to "
                        "resume from")
        for name in ("checkpoint_every", "keep_best"):
            if getattr(c, name):
                checks.fail(owner, name, getattr(c, name), "0 or False without a "
                            "checkpoint_dir to write to")
    if c.data_shards is not None:
        checks.check_int(owner, "data_shards", c.data_shards, 1)
        for name in ("num_envs", "batch_size"):
            if getattr(c, name) % c.data_shards:
                checks.fail(owner, name, getattr(c, name), f"a multiple of data_shards="
                            f"{c.data_shards} (each shard gets an equal part)")
    checks.check_int(owner, "buffer_capacity", c.buffer_capacity, c.num_envs)
    if c.buffer_capacity % c.num_envs:
        checks.fail(owner, "buffer_capacity", c.buffer_capacity,
                    f"a multiple of num_envs={c.num_envs} (each env gets an equal ring)")
    if c.action_noise_horizon is not None:
        checks.check_int(owner, "action_noise_horizon", c.action_noise_horizon, 2)
        if not c.action_noise_exponent:
            checks.fail(owner, "action_noise_horizon", c.action_noise_horizon,
                        "None with white exploration noise (action_noise_exponent=0)")
    if c.priority_beta_final is not None:
        checks.check_real(owner, "priority_beta_final", c.priority_beta_final, 0.0, 1.0)
        if not c.prioritized:
            checks.fail(owner, "priority_beta_final", c.priority_beta_final,
                        "None without prioritized replay (prioritized=False)")
    checks.check_n_step(owner, c.n_step)
