"""Replay: the episode buffer (each env step stored once, n-step transitions built at
sample time, uniform or prioritized), and the buffers built from it.

    buf = jaxsac.replay.episode_buffer(capacity, num_envs, batch_size, n_step=(2, 4))
    state = buf.init(example_step)       # one unbatched Step
    state = buf.add(state, step)         # Step [num_envs]
    batch = buf.sample(state, key)       # Batch [batch_size]
    state = buf.update_priorities(state, batch.indices, td_error)

Modules: `state` (ReplayState, the ReplayBuffer and StartSampler interfaces, row
flags), `validation` (the checks of settings and inputs), `uniform` (uniform start rows),
`prioritized` (start rows by priority, importance weights, the beta schedule, priority
updates), `sum_tree` (the priority trees), `n_step` (the walk that assembles
transitions), `frames` (frame stacks built at sample time), `episode` (init, add,
sample and the factory), `sharded` (S data shards), `stacked` (one buffer per module
of a multi-agent run).
"""

from jaxsac.replay.episode import episode_buffer
from jaxsac.replay.prioritized import scheduled_beta
from jaxsac.replay.sharded import shard_weight_scale, sharded_buffer
from jaxsac.replay.stacked import stacked_buffer
from jaxsac.replay.state import ReplayBuffer, ReplayState, end_episodes
from jaxsac.replay.sum_tree import TREE_ARITY
from jaxsac.replay.uniform import UNIFORM_CANDIDATES

__all__ = [
    "TREE_ARITY",
    "UNIFORM_CANDIDATES",
    "ReplayBuffer",
    "ReplayState",
    "end_episodes",
    "episode_buffer",
    "scheduled_beta",
    "shard_weight_scale",
    "sharded_buffer",
    "stacked_buffer",
]
