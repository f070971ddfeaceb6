"""experiments.train, the command line: one-line config errors with exit status 2, the
env id checked first, integer flags as `1e4` and `20_000`, `--tuned`'s ids in the help,
a smoke run that scales the defaults it conflicts with, and the run folder (refused
again, resumed, overwritten, resumed if present)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import jaxsac
from experiments import train as cli
from tests.support.helpers import TINY

ROOT = Path(__file__).resolve().parents[1]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of experiments.train in this process (which keeps
    the test session's compilation settings: --no-compilation-cache)."""
    try:
        cli.main([*argv, "--no-compilation-cache"])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def tiny_flags(log_dir: Path) -> list[str]:
    """Flags of the tiny test config (tests.support.helpers.TINY) in `log_dir`."""
    flags = ["--log-dir", str(log_dir), "--no-progress"]
    for name, value in TINY.items():
        values = value if isinstance(value, tuple) else (value,)
        flags += ["--" + name.replace("_", "-"), *map(str, values)]
    return flags


@pytest.mark.parametrize(("argv", "message"), [
    (["--env-id", "Pendulm-v1", "--total-env-steps", "1000", "--learning-starts", "5000"],
     r"env_id='Pendulm-v1' is not a registered gymnasium environment .*Did you mean: "
     r"`Pendulum`"),
    (["--gamma", "2"], r"SACConfig.gamma=2.0 is invalid: must be a finite number in"),
    (["--total-env-steps", "1000", "--learning-starts", "5_000"],
     r"SACConfig.learning_starts=5000 is invalid: must be below total_env_steps=1000"),
    (["--tuned", "Pendulum"], r"--tuned 'Pendulum': no tuned example; available: \[.*"
                              r"'Pendulum-v1'"),
    (["--total-env-steps", "1000", "--log-every", "300"],
     r"total_env_steps=1000 must be a multiple of log_every=300"),
    (["--resume", "--checkpoint-dir", "{tmp}/mistyped"],
     r"resume=True, but checkpoint_dir=.*mistyped' holds no checkpoint"),
    (["--resume-if-present"], r"--resume-if-present needs a --checkpoint-dir"),
])
def test_a_config_error_is_one_line_on_stderr_and_exit_status_2(argv, message, tmp_path,
                                                                  capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("experiments.train: error: ")
    assert re.search(message, err), err


def test_a_config_error_has_no_traceback_in_a_fresh_process():
    proc = subprocess.run([sys.executable, "-m", "experiments.train", "--num-envs", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == ("experiments.train: error: SACConfig.num_envs=0 is invalid: must "
                           "be an integer >= 1\n")


def test_integer_flags_take_underscores_and_exponents():
    args, _ = cli.parse(["--total-env-steps", "1e4", "--log-every=2_000", "--hidden-sizes",
                         "6.4e1", "32", "--num-seeds", "2", "--batch-size", "1_024",
                         "--gamma", "9.9e-1", "--seed", "7"])
    config = args.config
    assert (config.total_env_steps, config.log_every, config.hidden_sizes) == (
        10_000, 2_000, (64, 32))
    assert (args.num_seeds, config.batch_size, config.gamma, config.seed) == (2, 1024, 0.99, 7)
    # A number that is not an integer stays as it is, and is refused.
    assert cli.integer_text("1.5e0") == "1.5e0"
    with pytest.raises(SystemExit):
        cli.parse(["--total-env-steps", "1.5e3x"])


def test_tuned_help_lists_every_tuned_id(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0
    flat = re.sub(r"[\s│]+", " ", out)
    help_text = flat[flat.index("--tuned ENV_ID Start from"):]
    for env_id in jaxsac.tuned.available():
        assert env_id in help_text[:1000], env_id
    assert "--tuned {None}|STR" not in out


@pytest.mark.parametrize(("argv", "expected", "note"), [
    (["--total-env-steps", "1000"], {"learning_starts": 15, "log_every": 1000},
     r"learning_starts=1500 of SACConfig's defaults: using learning_starts=15"),
    (["--tuned", "Pendulum-v1", "--total-env-steps", "500"],
     {"learning_starts": 256, "log_every": 500},
     r"not a multiple of the log_every=1000 of the tuned example: using log_every=500"),
    (["--total-env-steps", "1_200", "--num-envs", "8", "--buffer-capacity", "8000"],
     {"learning_starts": 18, "log_every": 600}, r"using learning_starts=18.*using log_every=600"),
    (["--total-env-steps", "1000", "--learning-starts", "10"],
     {"learning_starts": 10, "log_every": 1000}, None),
])
def test_a_short_run_scales_the_defaults_it_conflicts_with_and_says_so(argv, expected, note):
    args, notes = cli.parse(argv)
    assert {name: getattr(args.config, name) for name in expected} == expected
    if note is None:
        assert notes == []
    else:
        assert re.search(note, " ".join(notes)), notes
    jaxsac.assembly.validate(args.config)  # a run that can be trained


def test_the_run_folder_from_new_run_to_resume_overwrite_and_resume_if_present(
        tmp_path, capsys):
    folder = tmp_path / "run"
    code, out, _ = run_cli(tiny_flags(folder), capsys)
    assert code == 0 and "final deterministic evaluation return" in out
    [run_id] = re.findall(r"^run: +(\S+)$", out, re.MULTILINE)
    assert jaxsac.runs.read_record(folder)["run_id"] == run_id
    assert jaxsac.load_policy(folder).step == TINY["total_env_steps"]  # folder/checkpoints
    # The same command again is refused; the folder stays as it was.
    rows = (folder / "metrics.csv").read_text()
    code, out, err = run_cli(tiny_flags(folder), capsys)
    assert code == 2 and "holds the checkpoints of run " + run_id in err
    assert (folder / "metrics.csv").read_text() == rows
    # Resuming a finished run says so and exits cleanly.
    code, out, err = run_cli([*tiny_flags(folder), "--resume"], capsys)
    assert code == 0, err
    assert f"jaxsac: resumed run {run_id} from step 600 of" in out
    assert f"jaxsac: run {run_id} is at total_env_steps=600 already: nothing to train" in out
    # --overwrite starts a new run in the folder; --resume-if-present continues it.
    code, out, err = run_cli([*tiny_flags(folder), "--overwrite", "--seed", "3"], capsys)
    assert code == 0, err
    assert "--overwrite: deleted" in out
    [new_id] = re.findall(r"^run: +(\S+)$", out, re.MULTILINE)
    assert new_id != run_id and jaxsac.runs.read_record(folder)["run_id"] == new_id
    assert len(rows.splitlines()) == len((folder / "metrics.csv").read_text().splitlines())
    code, out, err = run_cli([*tiny_flags(folder), "--resume-if-present", "--seed", "3"],
                             capsys)
    assert code == 0 and f"resumed run {new_id} from step 600" in out
    args, notes = cli.parse([*tiny_flags(tmp_path / "fresh"), "--resume-if-present"])
    assert not cli.prepare_run(args, notes).resume and notes == [
        f"no checkpoint in {tmp_path / 'fresh' / 'checkpoints'}: starting a new run"]
