"""The settings the networks read: the SACConfig fields of the "networks" part (sizes,
activation, number of critics, LayerNorm, log-std bounds, encoder, critic family and its
loss). Encoder, critic and head factories receive a `NetworkSettings`."""

from jaxsac.config import NETWORKS, settings_type

NetworkSettings = settings_type("NetworkSettings", (NETWORKS,))
