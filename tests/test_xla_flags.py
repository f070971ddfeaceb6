"""The XLA flag jaxsac adds at import: added in a fresh process, never over the user's
own setting of it, and only where it can take effect."""

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
    assert xla_flags.version_tuple("1.2") == (1, 2)


def test_nothing_is_added_once_the_backends_started_or_for_an_unknown_jaxlib(monkeypatch):
    environ = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    monkeypatch.setattr(xla_flags, "backends_started", lambda: True)
    assert not xla_flags.add_cpu_flags(environ)
    monkeypatch.setattr(xla_flags, "backends_started", lambda: False)
    monkeypatch.setattr(xla_flags.jaxlib, "__version__", "0.4.35")
    assert not xla_flags.add_cpu_flags(environ)
    assert environ == {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}


@pytest.mark.parametrize("preset", [None, f"{OPTION}=+individual_convolution"])
def test_importing_jaxsac_first_sets_xla_flags_for_the_process(preset):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if preset is not None:
        env["XLA_FLAGS"] = preset
    script = ("import os, jaxlib, jaxsac; from jaxsac import xla_flags; "
              "first, last = xla_flags.ACCEPTING_JAXLIB; "
              "print(first <= xla_flags.version_tuple(jaxlib.__version__) < last); "
              "print(os.environ.get('XLA_FLAGS', ''))")
    known, flags = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                  capture_output=True, text=True).stdout.splitlines()
    if preset is not None:
        assert flags == preset
    else:
        assert flags == (FLAG if known == "True" else "")
