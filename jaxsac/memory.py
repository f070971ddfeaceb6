"""Memory known before it is asked for: the bytes a run's state takes, from its shapes
alone, against what the devices have free.

An allocation larger than the host's memory does not fail cleanly on every backend (on
the CPU the kernel may refuse it while the run waits on the device forever), so `train`
compares the two before it allocates and refuses with the figures and the settings to
change.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

GIB = 2**30


def tree_bytes(tree: Any) -> int:
    """Bytes of every array of `tree` (concrete or abstract: `jax.ShapeDtypeStruct`s;
    typed PRNG keys count their key data)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        dtype = leaf.dtype
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            total += int(np.prod(leaf.shape)) * int(np.prod(jax.eval_shape(
                jax.random.key_data, leaf).shape[len(leaf.shape):])) * 4
        else:
            total += int(np.prod(leaf.shape)) * np.dtype(dtype).itemsize
    return total


def _host_bytes_available() -> int | None:
    """The host's available memory (Linux's MemAvailable), else its total; None when
    neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None


def free_bytes(devices: list[jax.Device]) -> int | None:
    """Bytes the `devices` have free together: their memory limit less what is in use
    where the backend reports it (GPUs, TPUs), the host's available memory for CPU
    devices (which share it); None when unknown."""
    if all(d.platform == "cpu" for d in devices):
        return _host_bytes_available()
    free = 0
    for device in devices:
        stats = device.memory_stats() or {}
        if "bytes_limit" not in stats:
            return None
        free += stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    return free


def check_fits(owner: str, needed: int, devices: list[jax.Device], breakdown: str,
               settings: str) -> None:
    """MemoryError, before anything is allocated, when `needed` bytes exceed what
    `devices` have free: it gives both figures, what the bytes are (`breakdown`) and
    the settings that change them."""
    free = free_bytes(devices)
    if free is not None and needed > free:
        raise MemoryError(f"{owner}: the run's state needs {needed / GIB:.2f} GiB ({breakdown})"
                          f", more than the {free / GIB:.2f} GiB free on "
                          f"{devices[0].platform} ({len(devices)} device(s)); {settings}")
