"""Runners of the peer comparisons (compare_peers.py, time_to_solve.py, learn_mujoco.py)
and of bench_startup.py's fresh processes: each runs in its own process, under jaxsac's `.venv` or
the peers' `.venv-peers`, and prints one JSON line of results."""
