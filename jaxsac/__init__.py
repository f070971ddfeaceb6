"""jaxsac: Soft Actor-Critic for JAX, written as pure functions.

    config = jaxsac.tuned("Pendulum-v1")
    result = jaxsac.train(config)                      # any backend
    train_fn = jaxsac.make_train(config)               # JAX envs: key -> (TrainState, metrics)
"""

from jaxsac import (
    connectors,
    distributed,
    envs,
    learner,
    multi_agent,
    networks,
    replay,
    sharding,
)
from jaxsac.algorithm import (
    TrainResult,
    TrainState,
    evaluate,
    make_train,
    train,
    training_step,
)
from jaxsac.checkpoint import load_policy
from jaxsac.config import SACConfig
from jaxsac.learner import LearnerState, make_learner
from jaxsac.tuned import tuned
from jaxsac.types import Batch, Step

__all__ = [
    "Batch",
    "LearnerState",
    "SACConfig",
    "Step",
    "TrainResult",
    "TrainState",
    "connectors",
    "distributed",
    "envs",
    "evaluate",
    "learner",
    "load_policy",
    "make_learner",
    "make_train",
    "multi_agent",
    "networks",
    "replay",
    "sharding",
    "train",
    "training_step",
    "tuned",
]
__version__ = "0.1.0"
