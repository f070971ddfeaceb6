#!/usr/bin/env bash
# Creates .venv-peers (the peer SAC libraries of experiments/benchmarks/compare_peers.py)
# and installs experiments/benchmarks/requirements-peers.txt into it. It is separate from
# jaxsac's .venv and never a dependency of jaxsac.
#
#   bash experiments/benchmarks/setup_peers.sh        # idempotent; reinstalls when the
#                                                     # requirements file changed
#
# torch must be the CPU build. `torch==2.13.0` resolves to the CPU wheel where pip finds
# one (a local wheel directory, or PyTorch's CPU index given with PIP_EXTRA_INDEX_URL);
# from PyPI alone, Linux x86-64 gets the CUDA build (several GB). The script checks what
# was installed and stops if torch is not a CPU build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${PEERS_VENV:-$ROOT/.venv-peers}"
REQS="$ROOT/experiments/benchmarks/requirements-peers.txt"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.peers-installed"

if [[ -f "$STAMP" ]] && cmp -s "$REQS" "$STAMP"; then
    echo "setup_peers: $VENV is up to date"
    exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# torch first and on its own, so its CPU build is chosen before anything pulls torch in.
"$VENV/bin/python" -m pip install --quiet "$(grep -E '^torch==' "$REQS")"
"$VENV/bin/python" -m pip install --quiet -r "$REQS"

"$VENV/bin/python" - <<'EOF'
import sys

import torch

if torch.version.cuda is not None or torch.cuda.is_available():
    sys.exit(f"setup_peers: torch {torch.__version__} is a CUDA build; install the CPU "
             "build (see the comment at the top of setup_peers.sh)")
from importlib import metadata

names = ("torch", "stable-baselines3", "sbx-rl", "rejax", "gymnax", "brax", "playground",
         "mujoco", "mujoco-mjx", "jax", "flax", "gymnasium")
print("setup_peers: " + ", ".join(f"{n} {metadata.version(n)}" for n in names))
EOF
cp "$REQS" "$STAMP"
