"""jaxsac: Soft Actor-Critic for JAX, written as pure functions.

    config = jaxsac.tuned("Pendulum-v1")
    result = jaxsac.train(config)                      # any backend
    train_fn = jaxsac.make_train(config)               # JAX envs: key -> (TrainState, metrics)
    policy = jaxsac.load_policy("runs/pendulum/checkpoints")

The package is layered: each module imports only from the layers listed before its own
(docs/architecture.md; tests/test_layers.py enforces it):

    records       types, checks, xla_flags
    observations  observations
    fields        field_roles, learner_fields, runner_fields
    config        config
    components    envs, networks, connectors, agents, logger, distributed, compilation,
                  tuned, storage, memory
    pieces        replay, learner, runners, sharding, runs
    schedule      schedule, metrics
    assembly      assembly
    shared steps  iteration, evaluation
    loops         jax_loop, host_loop, checkpoint
    entry points  train, policy
    media         video

Importing jaxsac before JAX starts its backends adds its CPU flag to XLA_FLAGS
(jaxsac.xla_flags: forward convolutions about 7x faster on the CPU).
"""

from jaxsac import xla_flags

xla_flags.add_cpu_flags()

from jaxsac import (
    checkpoint,
    compilation,
    connectors,
    distributed,
    envs,
    learner,
    networks,
    observations,
    replay,
    runners,
    runs,
    sharding,
    tuned,
)
from jaxsac.assembly import TrainState
from jaxsac.config import SACConfig
from jaxsac.evaluation import evaluate
from jaxsac.jax_loop import make_train
from jaxsac.learner import LearnerState, make_learner
from jaxsac.policy import Policy, load_policy
from jaxsac.train import TrainResult, train
from jaxsac.types import Batch, EpisodeInfo, Step
from jaxsac.video import Video, record_video

__all__ = [
    "Batch",
    "EpisodeInfo",
    "LearnerState",
    "Policy",
    "SACConfig",
    "Step",
    "TrainResult",
    "TrainState",
    "Video",
    "checkpoint",
    "compilation",
    "connectors",
    "distributed",
    "envs",
    "evaluate",
    "learner",
    "load_policy",
    "make_learner",
    "make_train",
    "networks",
    "observations",
    "record_video",
    "replay",
    "runners",
    "runs",
    "sharding",
    "train",
    "tuned",
]
__version__ = "0.1.0"
