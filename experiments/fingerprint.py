"""Fingerprints of short runs: the bits a change to the code must leave as they were.

    python -m experiments.fingerprint --out before.json --checkpoints /tmp/ckpts
    ... change the code ...
    python -m experiments.fingerprint --out after.json --compare before.json \
        --checkpoints /tmp/ckpts

Each case trains a short run of a tuned example and records a SHA-256 of every array of
its final TrainState and of its metrics. The cases: one jitted `make_train` program of
the tuned Pendulum-v1, a vmapped learning-rate sweep, chunked `train` with 2 vmapped
seeds, the gymnasium backend (and with observation normalization, whose statistics are
read back from its checkpoint), multi-agent Pendulum (independent modules jitted and
chunked, a shared module jitted), and `evaluate` on both backends. With
`--checkpoints DIR` the chunked Pendulum run also writes a checkpoint to DIR/pendulum
(kept when it exists already), and `--compare` then restores that checkpoint (written
by the code that made the earlier fingerprints) and resumes it. Equal hashes mean the
same bits on this machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

import jax
import numpy as np

import jaxsac

SHORT = dict(total_env_steps=1_200, learning_starts=256, log_every=400, eval_episodes=2,
             buffer_capacity=4_000, batch_size=64, hidden_sizes=(32, 32))


def digest(tree) -> str:
    """SHA-256 over every leaf's dtype, shape and bytes (typed keys as their data)."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        array = np.asarray(jax.device_get(leaf))
        h.update(f"{array.dtype}{array.shape}".encode())
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


def metrics_digest(metrics) -> str:
    return digest({k: np.asarray(v) for k, v in sorted(metrics.items())})


def cases(checkpoints: str | None, resume_only: bool):
    pendulum = jaxsac.tuned("Pendulum-v1", **SHORT)
    multi = jaxsac.tuned("MultiAgentPendulum-v1", **SHORT)
    out = {}

    state, metrics = jax.jit(jaxsac.make_train(pendulum))(jax.random.key(0))
    out["make_train/pendulum"] = (digest(state), metrics_digest(metrics))

    state, metrics = jax.jit(jax.vmap(jaxsac.make_train(multi)))(
        jax.random.split(jax.random.key(0), 2))
    out["make_train/multi_agent_2_seeds"] = (digest(state), metrics_digest(metrics))

    result = jaxsac.train(multi, progress=False)
    out["train/multi_agent"] = (digest(result.state), metrics_digest(result.metrics))

    directory = os.path.join(checkpoints, "pendulum") if checkpoints else None
    write = directory is not None and not os.path.isdir(directory)
    result = jaxsac.train(pendulum.replace(checkpoint_dir=directory if write else None),
                          num_seeds=2, progress=False)
    out["train/pendulum_2_seeds"] = (digest(result.state), metrics_digest(result.metrics))
    result_params = result.state.learner.actor_params

    gym = pendulum.replace(backend="gymnasium", total_env_steps=800)
    result = jaxsac.train(gym, progress=False)
    # The observation statistics (TrainState.runner of a gymnasium run) are left out:
    # they are constant without normalize_obs.
    out["train/gymnasium"] = (digest(result.state.replace(runner=None)),
                              metrics_digest(result.metrics))

    sweep = jaxsac.make_train(pendulum, sweep=("critic_lr",))
    state, metrics = jax.jit(jax.vmap(sweep))(jax.random.split(jax.random.key(1), 2),
                                              jax.numpy.array([3e-4, 1e-3]))
    out["make_train/critic_lr_sweep"] = (digest(state), metrics_digest(metrics))

    shared = multi.replace(policy_mapping="shared")
    state, metrics = jax.jit(jaxsac.make_train(shared))(jax.random.key(2))
    out["make_train/multi_agent_shared"] = (digest(state), metrics_digest(metrics))

    params = jax.tree.map(lambda x: x[0], result_params)
    out["evaluate/jax"] = (digest(jaxsac.evaluate(pendulum, params, jax.random.key(3), 3)),
                           "")
    out["evaluate/gymnasium"] = (digest(jaxsac.evaluate(gym, params, jax.random.key(3), 3)),
                                 "")

    with tempfile.TemporaryDirectory() as tmp:
        normalized = gym.replace(normalize_obs=True, checkpoint_dir=tmp)
        result = jaxsac.train(normalized, progress=False)
        restored, _ = jaxsac.checkpoint.restore(tmp)
        out["train/gymnasium_normalize_obs"] = (digest(restored),
                                                metrics_digest(result.metrics))

    if directory is not None and resume_only:
        with tempfile.TemporaryDirectory() as tmp:
            # A copy, so the stored checkpoint stays at 1,200 env steps for later runs.
            copy = shutil.copytree(directory, os.path.join(tmp, "pendulum"))
            resumed = pendulum.replace(checkpoint_dir=copy, resume=True, total_env_steps=1_600)
            result = jaxsac.train(resumed, num_seeds=2, progress=False)
        out["resume/pendulum_2_seeds_to_1600"] = (digest(result.state),
                                                  metrics_digest(result.metrics))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", default=None)
    parser.add_argument("--checkpoints", default=None)
    args = parser.parse_args(argv)
    found = cases(args.checkpoints, resume_only=args.checkpoints is not None)
    with open(args.out, "w") as f:
        json.dump(found, f, indent=1)
    if args.compare is None:
        print(json.dumps(found, indent=1))
        return 0
    with open(args.compare) as f:
        expected = json.load(f)
    status = 0
    for name, value in found.items():
        if name not in expected:
            print(f"{name}: {value} (no earlier value)")
            continue
        same = list(value) == list(expected[name])
        status |= not same
        print(f"{name}: {'same bits' if same else f'DIFFERENT {value} != {expected[name]}'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
