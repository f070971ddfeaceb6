"""The Makefile's two install levels: `make train` installs jaxsac alone (what Pendulum
needs), `make test` every extra setup.cfg declares, each with a stamp of its own so a
`make test` after `make train` still installs the extras (checked with `make -n`)."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def planned(target: str, venv: Path) -> list[str]:
    """The commands `make TARGET` would run for a virtualenv at `venv` (dry run)."""
    proc = subprocess.run(["make", "-n", f"VENV={venv}", target], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.splitlines()


def installed(commands: list[str]) -> list[str]:
    """What each `pip install -e` of `commands` installs ("." or ".[a,b]")."""
    return [m.group(1).strip("'\"") for line in commands
            if (m := re.search(r"pip install .*-e (\S+)", line))]


def declared_extras() -> set[str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return set(parser["options.extras_require"])


def test_make_train_installs_jaxsac_alone_and_make_test_every_extra(tmp_path):
    venv = tmp_path / "venv"
    assert installed(planned("train", venv)) == ["."]
    [everything] = installed(planned("test", venv))
    assert everything.startswith(".[") and set(everything[2:-1].split(",")) == declared_extras()
    # After `make train` (its stamp newer than setup.cfg), `make test` adds the extras
    # and `make train` installs nothing more; after `make test`, neither installs.
    venv.mkdir()
    (venv / ".jaxsac-installed-base").touch()
    assert installed(planned("train", venv)) == []
    assert installed(planned("test", venv)) == [everything]
    (venv / ".jaxsac-installed-all").touch()
    assert installed(planned("test", venv)) == installed(planned("train", venv)) == []
