"""XLA flags jaxsac asks of the CPU backend, added to the XLA_FLAGS environment
variable when jaxsac is imported before JAX starts its backends.

One flag today, `FAST_CONVOLUTIONS`: jaxlib 0.10's CPU backend hands each convolution on
its own to YNNPACK, which runs the convolutions of an image encoder about 7x slower than
XLA's own (Eigen's) on the CPUs measured; the flag keeps them in XLA
(docs/performance.md, "Image updates on the CPU"). It reaches only the CPU backend's
convolutions: a run without images keeps its bits, and GPU and TPU backends ignore it.

Nothing is added when XLA_FLAGS already names the flag (the user's setting stands), when
JAX's backends have already started (the flag could no longer take effect; image
updates then run at YNNPACK's speed), or with a jaxlib outside the versions known to
accept it (XLA ends the process at a flag it does not know). Child processes inherit
XLA_FLAGS: one that runs another jaxlib, which may not know the flag, needs its own.
"""

from __future__ import annotations

import os

import jaxlib

FAST_CONVOLUTIONS = "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"
"""Take single convolutions out of the library fusions YNNPACK runs."""

ACCEPTING_JAXLIB = ((0, 10, 2), (0, 11, 0))
"""[first, last) jaxlib versions known to accept FAST_CONVOLUTIONS."""


def version_tuple(version: str) -> tuple[int, ...]:
    """"0.10.2" -> (0, 10, 2); a suffix after the numbers ("0.10.2.dev1") is dropped."""
    numbers = []
    for part in version.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    return tuple(numbers)


def with_flag(xla_flags: str, flag: str) -> str:
    """XLA_FLAGS's value with `flag` added, unless it already names the flag's option."""
    option = flag.split("=", 1)[0]
    if any(word.split("=", 1)[0] == option for word in xla_flags.split()):
        return xla_flags
    return f"{xla_flags} {flag}".strip()


def backends_started() -> bool:
    """Whether JAX has already created its backends (then XLA_FLAGS is read and fixed)."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def add_cpu_flags(environ: dict[str, str] | None = None) -> bool:
    """Add FAST_CONVOLUTIONS to `environ`'s XLA_FLAGS (os.environ by default) where it
    can take effect and names nothing the user set; True when it was added."""
    environ = os.environ if environ is None else environ
    first, last = ACCEPTING_JAXLIB
    if not first <= version_tuple(jaxlib.__version__) < last or backends_started():
        return False
    before = environ.get("XLA_FLAGS", "")
    environ["XLA_FLAGS"] = with_flag(before, FAST_CONVOLUTIONS)
    return environ["XLA_FLAGS"] != before
