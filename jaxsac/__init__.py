"""jaxsac: Soft Actor-Critic for JAX, written as pure functions."""

from jaxsac.config import SACConfig
from jaxsac.types import Batch, Step

__all__ = ["Batch", "SACConfig", "Step"]
__version__ = "0.1.0"
