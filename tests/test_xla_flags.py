"""The XLA flag jaxsac adds at import: added in a fresh process (whose backend then
starts with it), never over the user's own setting of it, and only where it is wanted
and can take effect."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jaxsac import xla_flags

FLAG = xla_flags.FAST_CONVOLUTIONS
OPTION = FLAG.split("=")[0]


def test_with_flag_adds_it_once_and_leaves_the_users_setting_of_it():
    assert xla_flags.with_flag("", FLAG) == FLAG
    assert xla_flags.with_flag("--xla_force_host_platform_device_count=4", FLAG) == (
        f"--xla_force_host_platform_device_count=4 {FLAG}")
    assert xla_flags.with_flag(FLAG, FLAG) == FLAG
    users = f"{OPTION}=+individual_convolution --xla_cpu_enable_fast_math=false"
    assert xla_flags.with_flag(users, FLAG) == users


def test_version_tuple_reads_the_numbers_of_a_version():
    assert xla_flags.version_tuple("0.10.2") == (0, 10, 2)
    assert xla_flags.version_tuple("0.11.0.dev20261201") == (0, 11, 0)
    assert xla_flags.version_tuple("0.10.1rc2") == (0, 10, 1)
    assert xla_flags.version_tuple("0.10.1+cuda12") == (0, 10, 1)
    assert xla_flags.version_tuple("1.2") == (1, 2)


def test_the_flag_is_added_only_where_it_is_wanted_and_known(monkeypatch):
    """Not once the backends started, with an accelerator plugin, with a jaxlib outside
    the known versions, or with the opt-out; added otherwise."""
    def environ():
        return {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}

    monkeypatch.setattr(xla_flags.jaxlib, "__version__", "0.10.2")
    monkeypatch.setattr(xla_flags, "accelerator_plugin_installed", lambda: False)
    monkeypatch.setattr(xla_flags, "backends_started", lambda: False)
    added = environ()
    assert xla_flags.add_cpu_flags(added)
    assert added["XLA_FLAGS"] == f"--xla_cpu_enable_fast_math=false {FLAG}"
    assert not xla_flags.add_cpu_flags({**environ(), xla_flags.OPT_OUT: "0"})
    for name, value in (("backends_started", lambda: True),
                        ("accelerator_plugin_installed", lambda: True)):
        with monkeypatch.context() as patched:
            patched.setattr(xla_flags, name, value)
            kept = environ()
            assert not xla_flags.add_cpu_flags(kept) and kept == environ()
    monkeypatch.setattr(xla_flags.jaxlib, "__version__", "0.4.35")
    kept = environ()
    assert not xla_flags.add_cpu_flags(kept) and kept == environ()


@pytest.mark.parametrize("preset", [None, f"{OPTION}=+individual_convolution"])
def test_importing_jaxsac_first_sets_xla_flags_for_the_process(preset):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if preset is not None:
        env["XLA_FLAGS"] = preset
    env.pop(xla_flags.OPT_OUT, None)
    # The backend starts after the import, with the flags it set: XLA accepts them.
    script = ("import os, jaxlib, jaxsac; from jaxsac import xla_flags; "
              "first, last = xla_flags.ACCEPTING_JAXLIB; "
              "import jax; jax.numpy.ones(2).block_until_ready(); "
              "print(first <= xla_flags.version_tuple(jaxlib.__version__) < last "
              "and not xla_flags.accelerator_plugin_installed()); "
              "print(os.environ.get('XLA_FLAGS', ''))")
    known, flags = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                  capture_output=True, text=True).stdout.splitlines()
    if preset is not None:
        assert flags == preset
    else:
        assert flags == (FLAG if known == "True" else "")
