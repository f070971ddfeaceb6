"""The replay buffers of M modules of a multi-agent run, stacked along a module axis."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsac.agents import AgentLayout
from jaxsac.replay.state import ReplayBuffer


def stacked_buffer(buffer: ReplayBuffer, layout: AgentLayout) -> ReplayBuffer:
    """`buffer` (E columns) vmapped over M modules (`buffer` itself for one module).

    add(state, step [E·N]) gives module m agent m's columns; sample(state, key) ->
    Batch [M, B]; update_priorities(state, indices [M, B], td_error [M, B]).
    """
    if layout.num_modules == 1:
        return buffer
    modules = jnp.arange(layout.num_modules)
    return ReplayBuffer(
        init=lambda example: jax.vmap(lambda _: buffer.init(example))(modules),
        add=lambda state, step: jax.vmap(buffer.add)(state, layout.to_modules(step)),
        sample=lambda state, key: jax.vmap(buffer.sample)(state, layout.module_keys(key)),
        update_priorities=jax.vmap(buffer.update_priorities),
        can_sample=jax.vmap(buffer.can_sample),
    )
