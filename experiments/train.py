"""Train SAC from the command line; every SACConfig field is a flag.

    python -m experiments.train --tuned Pendulum-v1 --num-seeds 5 --log-dir runs/pendulum
    python -m experiments.train --env-id MountainCarContinuous-v0 --total-env-steps 50000
    python -m experiments.train --help

`--tuned ENV_ID` starts from that tuned example; other flags override its values.
`--num-seeds N` trains N seeds vmapped in one program (JAX envs).
`--distributed` starts JAX's distributed runtime first (every host runs the same
command; see docs/scaling.md), as do JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
JAX_PROCESS_ID when set; the data shards then spread over the devices of all hosts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Annotated

import numpy as np
import tyro

import jaxsac
from jaxsac.tuned import available


@dataclasses.dataclass
class Args:
    """Train SAC. Every SACConfig field is a flag; --tuned picks a tuned example's defaults."""

    config: Annotated[jaxsac.SACConfig, tyro.conf.arg(name=""), tyro.conf.OmitArgPrefixes]
    tuned: str | None = None
    """Start from this env id's tuned example (one of jaxsac.tuned.available())."""
    num_seeds: int = 1
    """Seeds trained together (vmapped in one program for JAX envs)."""
    progress: bool = True
    """Show progress: a bar on a terminal, else (a batch job) one line per log period."""
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


def parse(argv: list[str]) -> Args:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--tuned", default=None)
    known, _ = pre.parse_known_args(argv)
    if known.tuned is not None and known.tuned not in available():
        raise SystemExit(f"--tuned {known.tuned!r}: no tuned example; available: {available()}")
    base = jaxsac.tuned(known.tuned) if known.tuned else jaxsac.SACConfig()
    return tyro.cli(Args, default=Args(config=base, tuned=known.tuned), args=argv,
                    description=__doc__)


def main(argv: list[str] | None = None) -> jaxsac.TrainResult:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.distributed or jaxsac.distributed.explicit_settings() is not None:
        jaxsac.distributed.initialize()
    if args.compilation_cache:
        jaxsac.compilation.enable_cache()
    else:
        jaxsac.compilation.disable_cache()
    config = args.config
    if args.video and not config.log_dir:
        raise SystemExit("--video writes log_dir/policy.mp4 beside the curve: set --log-dir")
    print(f"jaxsac: training {config.env_id} for {config.total_env_steps} env steps"
          f" x {args.num_seeds} seed(s)")
    result = jaxsac.train(config, num_seeds=args.num_seeds, progress=args.progress)
    final = np.atleast_1d(result.metrics["eval_return"][-1])
    print("final deterministic evaluation return per seed (and agent): "
          f"{np.round(final, 1).tolist()}")
    if config.log_dir:
        log_dir = os.path.abspath(config.log_dir)
        print(f"metrics:      {os.path.join(log_dir, 'metrics.csv')}")
        print(f"tensorboard:  {os.path.join(log_dir, 'tb')}")
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
