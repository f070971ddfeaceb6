"""Train SAC from the command line; every SACConfig field is a flag.

    python -m experiments.train --tuned Pendulum-v1 --num-seeds 5 --log-dir runs/pendulum
    python -m experiments.train --env-id MountainCarContinuous-v0 --total-env-steps 50000
    python -m experiments.train --help

`--tuned ENV_ID` starts from that tuned example; other flags override its values.
`--num-seeds N` trains N seeds vmapped in one program (JAX envs).

`--log-dir DIR` is the run's folder: metrics.csv, TensorBoard events (DIR/tb),
curve.png, the run's record (run.json) and, unless --checkpoint-dir says otherwise,
its checkpoints (DIR/checkpoints). A new run refuses a folder that holds a previous
run's files: `--resume` continues that run (an error when there is no checkpoint,
unless `--resume-if-present`, which then starts a new run), `--overwrite` deletes them
first (jaxsac.runs).

Integer flags take `20_000` and `1e4`. A `--total-env-steps` at most the learning_starts
of the defaults (or not a multiple of their log_every) scales those defaults, with a
note; flags given explicitly are never changed. A config error is one line on stderr
and exit status 2.

`--distributed` starts JAX's distributed runtime first (every host runs the same
command; see docs/scaling.md), as do JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
JAX_PROCESS_ID when set; the data shards then spread over the devices of all hosts.
"""

from __future__ import annotations

import argparse
import dataclasses
import decimal
import logging
import os
import sys
import warnings
from typing import Annotated

import numpy as np
import tyro

import jaxsac
from jaxsac.assembly import validate
from jaxsac.tuned import available

PROG = "experiments.train"
TUNED_IDS = available()


@dataclasses.dataclass
class Args:
    """Train SAC. Every SACConfig field is a flag; --tuned picks a tuned example's defaults."""

    config: Annotated[jaxsac.SACConfig, tyro.conf.arg(name=""), tyro.conf.OmitArgPrefixes]
    tuned: Annotated[str | None, tyro.conf.arg(
        metavar="ENV_ID", help="Start from this env id's tuned example, one of: "
        + ", ".join(TUNED_IDS) + ".")] = None
    num_seeds: int = 1
    """Seeds trained together (vmapped in one program for JAX envs)."""
    progress: bool = True
    """Show progress: a bar on a terminal, else (a batch job) one line per log period,
    and "jaxsac" log lines such as a resume's."""
    resume_if_present: bool = False
    """Resume when the checkpoint dir holds a checkpoint, else start a new run (for jobs
    requeued with the same command)."""
    overwrite: bool = False
    """Delete a previous run's logs and checkpoints in the log and checkpoint dirs first."""
    compilation_cache: bool = True
    """Keep compiled programs on disk between runs (jaxsac.compilation; the folder is
    $JAXSAC_CACHE_DIR, else ~/.cache/jaxsac/xla)."""
    video: bool = False
    """Write an MP4 of the final policy (the first seed's, deterministic) beside the curve:
    log_dir/policy.mp4 (needs --log-dir and `pip install -e '.[video]'`)."""
    distributed: bool = False
    """Multi-host: call jax.distributed.initialize() (JAX_COORDINATOR_ADDRESS,
    JAX_NUM_PROCESSES, JAX_PROCESS_ID, or SLURM / Open MPI / Cloud TPU detection).
    Implied when those three variables are set."""


INT_FLAGS = frozenset(
    [f.name for f in dataclasses.fields(jaxsac.SACConfig)
     if "int" in str(f.type) and "float" not in str(f.type)] + ["num_seeds"])
"""Flags (as field names) whose values are integers: they also take `20_000`, `1e4`."""


def flag_name(token: str) -> str | None:
    """"total_env_steps" for "--total-env-steps" or "--total-env-steps=5"; None for a
    value."""
    if not token.startswith("--"):
        return None
    return token[2:].split("=", 1)[0].replace("-", "_")


def integer_text(value: str) -> str:
    """"10000" for "1e4" or "10_000.0" (an integral number); other text as it is."""
    try:
        number = decimal.Decimal(value.replace("_", ""))
    except decimal.InvalidOperation:
        return value
    if not number.is_finite() or number != number.to_integral_value():
        return value
    return str(int(number))


def normalize_integers(argv: list[str]) -> list[str]:
    """`argv` with the values of integer flags written as plain integers."""
    out, current = [], None
    for token in argv:
        name = flag_name(token)
        if name is not None:
            current = name if name in INT_FLAGS else None
            if "=" in token and current:
                flag, value = token.split("=", 1)
                token = f"{flag}={integer_text(value)}"
        elif current:
            token = integer_text(token)
        out.append(token)
    return out


def given_flags(argv: list[str]) -> set[str]:
    return {name for name in map(flag_name, argv) if name is not None}


def preparse(argv: list[str]) -> argparse.Namespace:
    """The flags needed before the config is built: --tuned, --env-id, --backend,
    --total-env-steps and --log-dir."""
    pre = argparse.ArgumentParser(add_help=False)
    for flag in ("--tuned", "--env-id", "--backend", "--total-env-steps", "--log-dir"):
        pre.add_argument(flag, default=None)
    return pre.parse_known_args(argv)[0]


def check_env_id(env_id: str, backend: str | None) -> None:
    """ValueError for an env id no backend has (gymnasium's suggestion included)."""
    if jaxsac.envs.resolve_backend(env_id, backend or "auto", owner="SACConfig") == "gymnasium":
        jaxsac.envs.make(env_id, "gymnasium")


def fit_to_total(base: jaxsac.SACConfig, total: int, given: set[str], num_envs: int,
                 explicit: dict[str, int]) -> tuple[jaxsac.SACConfig, list[str]]:
    """`base` for a run of `total` env steps: its learning_starts scaled to the same
    share of the run when `total` is at most it, its log_every lowered to the largest
    divisor of `total` (a multiple of num_envs) when it does not divide `total`; never
    a field in `given` (`explicit`: the values given of these two). Returns (config,
    notes)."""
    changes = {"total_env_steps": total, **explicit}
    notes = []
    source = "the tuned example" if "tuned" in given else "SACConfig's defaults"
    if "learning_starts" not in given and base.learning_starts >= total:
        changes["learning_starts"] = base.learning_starts * total // base.total_env_steps
        notes.append(f"--total-env-steps {total} is at most the learning_starts="
                     f"{base.learning_starts} of {source}: using learning_starts="
                     f"{changes['learning_starts']} (the same share of the run; pass "
                     "--learning-starts to choose)")
    if "log_every" not in given and total % base.log_every:
        divisors = [d for d in range(min(base.log_every, total), 0, -1)
                    if total % d == 0 and d % num_envs == 0]
        if divisors:
            changes["log_every"] = divisors[0]
            notes.append(f"--total-env-steps {total} is not a multiple of the log_every="
                         f"{base.log_every} of {source}: using log_every={divisors[0]} "
                         "(pass --log-every to choose)")
    return base.replace(**changes), notes


def parse(argv: list[str]) -> tuple[Args, list[str]]:
    """(Args, notes) of the command line; ValueError for a bad env id or config."""
    argv = normalize_integers(argv)
    given = given_flags(argv)
    known = preparse(argv)
    if known.tuned is not None and known.tuned not in TUNED_IDS:
        raise ValueError(f"--tuned {known.tuned!r}: no tuned example; available: {TUNED_IDS}")
    base = jaxsac.tuned(known.tuned) if known.tuned else jaxsac.SACConfig()
    check_env_id(known.env_id or base.env_id, known.backend or base.backend)
    notes: list[str] = []
    if known.total_env_steps is not None and known.total_env_steps.isdigit():
        num_envs = int(preparse_value(argv, "num_envs") or base.num_envs)
        explicit = {name: int(value) for name in ("learning_starts", "log_every")
                    if (value := preparse_value(argv, name)) is not None}
        base, notes = fit_to_total(base, int(known.total_env_steps), given, num_envs,
                                   explicit)
    if known.log_dir and "checkpoint_dir" not in given:  # the run folder holds its checkpoints
        base = base.replace(checkpoint_dir=os.path.join(known.log_dir, "checkpoints"))
    args = tyro.cli(Args, default=Args(config=base, tuned=known.tuned), args=argv,
                    description=__doc__, prog=PROG)
    return args, notes


def preparse_value(argv: list[str], name: str) -> str | None:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--" + name.replace("_", "-"), dest=name, default=None)
    value = getattr(pre.parse_known_args(argv)[0], name)
    return value if value is not None and value.isdigit() else None


def resume_if_present(config: jaxsac.SACConfig, notes: list[str]) -> jaxsac.SACConfig:
    if config.checkpoint_dir is None:
        raise ValueError("--resume-if-present needs a --checkpoint-dir (or a --log-dir, "
                         "whose checkpoints folder it is)")
    present = jaxsac.checkpoint.latest_step(config.checkpoint_dir) is not None
    if not present:
        notes.append(f"no checkpoint in {config.checkpoint_dir}: starting a new run")
    return config.replace(resume=present)


def prepare_run(args: Args, notes: list[str]) -> jaxsac.SACConfig:
    """The config (resumed if present), checked against what a run can do and against
    its folders; with --overwrite the previous run's files are deleted first."""
    config = args.config
    if args.resume_if_present:
        config = resume_if_present(config, notes)
    validate(config)
    if args.overwrite:
        if config.resume:
            raise ValueError("--overwrite deletes the run that --resume would continue: "
                             "pass one of them")
        deleted = jaxsac.runs.clear(config.log_dir, config.checkpoint_dir)
        if deleted:
            notes.append(f"--overwrite: deleted {len(deleted)} files and folders of the "
                         f"previous run: {', '.join(deleted)}")
    jaxsac.runs.check_run(config, PROG)
    return config


class StdoutLines(logging.Handler):
    """Log records as lines on the current sys.stdout."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), flush=True)


def show_log_lines() -> None:
    """The "jaxsac" logger's messages (a resume's, ...) printed, without a progress bar."""
    logger = logging.getLogger("jaxsac")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not any(isinstance(handler, StdoutLines) for handler in logger.handlers):
        logger.addHandler(StdoutLines())


def config_error(error: Exception) -> SystemExit:
    """Print `error` as one line on stderr; the exit (status 2) to raise."""
    print(f"{PROG}: error: {str(error).removeprefix(PROG + ': ')}", file=sys.stderr)
    return SystemExit(2)


CONFIG_ERRORS = (ValueError, FileExistsError, FileNotFoundError)


def main(argv: list[str] | None = None) -> jaxsac.TrainResult | None:
    try:
        args, notes = parse(list(sys.argv[1:] if argv is None else argv))
    except CONFIG_ERRORS as e:
        raise config_error(e) from None
    # Before anything asks JAX for its devices (the run's checks ask for the process).
    if args.distributed or jaxsac.distributed.explicit_settings() is not None:
        jaxsac.distributed.initialize()
    if args.compilation_cache:  # before anything is compiled
        jaxsac.compilation.enable_cache()
    else:
        jaxsac.compilation.disable_cache()
    try:
        config = prepare_run(args, notes)
    except CONFIG_ERRORS as e:
        raise config_error(e) from None
    for note in notes:
        print(f"{PROG}: note: {note}")
    if args.video and not config.log_dir:
        raise config_error(ValueError("--video writes log_dir/policy.mp4 beside the curve: "
                                      "set --log-dir"))
    if not args.progress:
        show_log_lines()
    print(f"jaxsac: training {config.env_id} for {config.total_env_steps} env steps"
          f" x {args.num_seeds} seed(s)")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*nothing to train")
        result = jaxsac.train(config, num_seeds=args.num_seeds, progress=args.progress)
    if not result.metrics:
        print(f"jaxsac: run {result.run_id} is at total_env_steps={config.total_env_steps} "
              "already: nothing to train (pass a larger --total-env-steps to extend it)")
        return result
    final = np.atleast_1d(result.metrics["eval_return"][-1])
    print("final deterministic evaluation return per seed (and agent): "
          f"{np.round(final, 1).tolist()}")
    print(f"run:          {result.run_id}")
    if config.log_dir:
        log_dir = os.path.abspath(config.log_dir)
        print(f"metrics:      {os.path.join(log_dir, 'metrics.csv')}")
        print(f"tensorboard:  {os.path.join(log_dir, 'tb')}   (tensorboard --logdir "
              f"{os.path.join(log_dir, 'tb')})")
        print(f"curve:        {os.path.join(log_dir, 'curve.png')}")
    if config.checkpoint_dir:
        print(f"checkpoints:  {os.path.abspath(config.checkpoint_dir)}")
    if args.video:
        video = jaxsac.record_video(jaxsac.Policy.from_state(config, result.state),
                                    os.path.join(os.path.abspath(config.log_dir), "policy.mp4"))
        print(f"video:        {video.path} ({video.num_frames} frames, return "
              f"{video.episode_return:.1f})")
    return result


if __name__ == "__main__":
    main()
