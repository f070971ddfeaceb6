"""XLA flags jaxsac asks of the CPU backend, added to the XLA_FLAGS environment
variable when jaxsac is imported before JAX starts its backends.

One flag today, `FAST_CONVOLUTIONS`: jaxlib 0.10's CPU backend hands each convolution on
its own to YNNPACK, which runs the forward convolutions of an image encoder about 7x
slower than XLA's own (Eigen's) on the CPUs measured; the flag keeps them in XLA
(docs/performance.md, "Image updates on the CPU"). It reaches only the CPU backend's
convolutions: a run without images keeps its bits. An image run's convolutions round
differently with and without it, so an image run's bits depend on whether jaxsac was
imported before JAX started (the same process setup gives the same bits).

It is added only where it is wanted and known to be safe: on a machine without a JAX
accelerator plugin (GPU or TPU; their image updates do not run on the CPU, and XLA ends
the process at a flag that any XLA in it does not know), with a jaxlib among the versions
known to accept it, before JAX's backends start (later it could no longer take effect),
and when XLA_FLAGS does not already name the option (the user's setting stands).
`JAXSAC_CPU_FLAGS=0` turns it off. Child processes inherit XLA_FLAGS: one that runs
another jaxlib, which may not know the flag, needs its own.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re

import jaxlib

FAST_CONVOLUTIONS = "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"
"""Take single convolutions out of the library fusions YNNPACK runs."""

ACCEPTING_JAXLIB = ((0, 10, 2), (0, 11, 0))
"""[first, last) jaxlib versions known to accept FAST_CONVOLUTIONS."""

OPT_OUT = "JAXSAC_CPU_FLAGS"
"""The environment variable that turns the flag off when it is "0"."""


def version_tuple(version: str) -> tuple[int, ...]:
    """"0.10.2" -> (0, 10, 2): the leading digits of each of the first three parts
    ("0.10.1rc2" -> (0, 10, 1)); a part without them counts 0."""
    numbers = []
    for part in version.split(".")[:3]:
        digits = re.match(r"\d+", part)
        numbers.append(int(digits.group()) if digits else 0)
    return tuple(numbers)


def with_flag(xla_flags: str, flag: str) -> str:
    """XLA_FLAGS's value with `flag` added, unless it already names the flag's option."""
    option = flag.split("=", 1)[0]
    if any(word.split("=", 1)[0] == option for word in xla_flags.split()):
        return xla_flags
    return f"{xla_flags} {flag}".strip()


def accelerator_plugin_installed() -> bool:
    """Whether a JAX accelerator plugin is installed: one registered under the
    "jax_plugins" entry points (how JAX finds its GPU plugins) or libtpu."""
    return (bool(importlib.metadata.entry_points(group="jax_plugins"))
            or importlib.util.find_spec("libtpu") is not None)


def backends_started() -> bool:
    """Whether JAX has already created its backends (then XLA_FLAGS is read and fixed)."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def add_cpu_flags(environ: dict[str, str] | None = None) -> bool:
    """Add FAST_CONVOLUTIONS to `environ`'s XLA_FLAGS (os.environ by default) where it
    is wanted and can take effect (the module docstring); True when it was added."""
    environ = os.environ if environ is None else environ
    first, last = ACCEPTING_JAXLIB
    if (environ.get(OPT_OUT) == "0"
            or not first <= version_tuple(jaxlib.__version__) < last
            or accelerator_plugin_installed() or backends_started()):
        return False
    before = environ.get("XLA_FLAGS", "")
    environ["XLA_FLAGS"] = with_flag(before, FAST_CONVOLUTIONS)
    return environ["XLA_FLAGS"] != before
