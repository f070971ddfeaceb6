"""Episode bookkeeping shared by the runners: running returns and lengths per env, and
the totals of the episodes that end at each step (numpy on the host, jax.numpy inside
a jitted runner)."""

from __future__ import annotations

import numpy as np

from jaxsac.types import EpisodeInfo


def bookkeeping(episode_return, episode_length, reward, not_a_step, done, xp):
    """Running returns/lengths after this step, and the finished episodes' totals.

    not_a_step: [E] bool, rows that are no env step of the episode (reset rows, and
    the host runner's failed steps); they add no length (and have reward 0).
    Works on numpy (host runner) or jax.numpy (JAX runner) arrays of shape [E].
    """
    episode_return = episode_return + reward
    episode_length = episode_length + (~not_a_step).astype(episode_length.dtype)
    done = done & (episode_length > 0)  # an env that fails right after its reset ends none
    finished = EpisodeInfo(
        done=done,
        episode_return=xp.where(done, episode_return, 0).astype(np.float32),
        episode_length=xp.where(done, episode_length, 0).astype(np.int32))
    episode_return = xp.where(done, 0, episode_return).astype(episode_return.dtype)
    episode_length = xp.where(done, 0, episode_length).astype(episode_length.dtype)
    return episode_return, episode_length, finished
