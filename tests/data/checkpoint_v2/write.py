"""Writes tests/data/checkpoint_v2 (run with the code of commit 04fcb1e, format 2):

    cd <checkout of 04fcb1e> && PYTHONPATH=. python <this file> /tmp/checkpoint_v2
    cp -r /tmp/checkpoint_v2/400 /tmp/checkpoint_v2/digests.json tests/data/checkpoint_v2/

A tiny Pendulum-v1 run of 400 env steps checkpointed at 400 (directory `400/`), and
digests.json: per TrainState leaf, the SHA-256 of its bytes (typed keys by their key
data), its dtype and the float64 sum of its values, for the state the run saved
("saved") and for the state after resuming a copy of it for one more log period, to
600 env steps ("resumed"), with the resumed run's metrics.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile

import jax
import numpy as np

import jaxsac

CONFIG = dict(env_id="Pendulum-v1", hidden_sizes=(8, 8), batch_size=16, buffer_capacity=500,
              learning_starts=100, log_every=200, total_env_steps=400, eval_episodes=1,
              seed=3)


def leaf_records(state) -> dict[str, dict]:
    """{leaf path: {"sha256", "dtype", "sum"}} (typed keys by their key data)."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        array = np.ascontiguousarray(jax.device_get(leaf))
        out[jax.tree_util.keystr(path)] = {
            "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
            "dtype": array.dtype.name, "shape": list(array.shape),
            "sum": float(np.sum(array, dtype=np.float64))}
    return out


def main(target: str) -> None:
    directory = os.path.abspath(target)
    config = jaxsac.SACConfig(**CONFIG, checkpoint_dir=directory)
    saved = jaxsac.train(config, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        copy = shutil.copytree(directory, os.path.join(tmp, "ckpt"))
        resumed = jaxsac.train(config.replace(checkpoint_dir=copy, resume=True,
                                              total_env_steps=600), progress=False)
    metrics = {k: np.asarray(v).tolist() for k, v in resumed.metrics.items()
               if k in ("env_steps", "grad_steps", "iteration")}
    with open(os.path.join(directory, "digests.json"), "w") as f:
        json.dump({"config": config.replace(checkpoint_dir=None).to_dict(),
                   "saved": leaf_records(saved.state),
                   "resumed": leaf_records(resumed.state),
                   "resumed_metrics": metrics}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
