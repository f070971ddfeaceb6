"""stable-baselines3 SAC (torch, CPU) on gymnasium's Pendulum-v1; prints one JSON line.

Run with the peers' virtualenv, from the repository root:

    .venv-peers/bin/python -m experiments.benchmarks.peer_runners.sb3_sac --seed 0
"""

from __future__ import annotations

from experiments.benchmarks.peer_runners import common


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--torch-threads", type=int, default=0,
                   help="torch intra-op threads (0: torch's default, one per core)")
    args = p.parse_args()
    common.check_args(args)
    if args.num_seeds != 1:
        raise SystemExit("sb3 trains one seed per process: --num-seeds must be 1")

    import torch
    from stable_baselines3 import SAC

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    versions = common.package_versions("stable-baselines3", "torch", "gymnasium", "numpy")
    record = common.run_sb3_api(
        SAC, "sb3", args, versions, meter=None,
        extra={"device": "cpu", "torch_threads": torch.get_num_threads()})
    common.emit(record)


if __name__ == "__main__":
    main()
