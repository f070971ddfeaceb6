"""What every runner of the peer comparison shares: the settings, the clock, the
compile-time meter, the common final evaluation and the one-line JSON result.

Imported both from jaxsac's `.venv` (the jaxsac runner) and from `.venv-peers` (the
peers), so it needs only numpy and gymnasium (and jax where a runner uses JAX, and
MuJoCo Playground for the "playground/<task>" evaluation, installed in both).

Timing protocol (the same for every library, see docs/peers.md):

- `t0` is taken after imports and backend initialisation, right before the env and the
  agent are built; `wall_s` ends when the trained parameters are ready.
- A timestamp is taken at every `mark_every` env steps (jaxsac's log period; 1,000 for
  Pendulum-v1).
- Steady env steps/s = (mark_end - mark_start) / (t[mark_end] - t[mark_start]), with
  mark_start the first mark at least learning_starts + mark_every (learning_starts +
  mark_every when learning_starts is a multiple of mark_every): at least one whole
  learning period after the first gradient step, so compilation triggered by learning
  has happened in every library.
- start-up s = t[mark_start] - (mark_start - learning_starts) / steady rate: everything
  before steady learning (construction, compilation, the random-action warm-up) beyond
  what the first learning period would take at the steady rate.
- compile s: time spent tracing, lowering and compiling JAX programs (the union of the
  spans jax.monitoring reports) from t0 until the trained parameters are ready (the
  final evaluation's compilation, like its time, is outside), for JAX libraries; None
  for torch.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from experiments.benchmarks.peer_tasks import steady_start

EVAL_SEED_BASE = 10_000
"""Episode i of the common evaluation resets the gymnasium env with seed base + i (a
Playground task's with the key PRNGKey(base + i))."""

PLAYGROUND_PREFIX = "playground/"
"""Env ids "playground/<task>": MuJoCo Playground's <task> (MJX physics)."""

COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def parser(description: str) -> argparse.ArgumentParser:
    """The settings every runner takes (the comparison's shared hyperparameters)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--env-id", default="Pendulum-v1",
                   help="gymnasium id (its JAX port for the JAX libraries)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-seeds", type=int, default=1,
                   help="seeds vmapped in one program (JAX libraries only)")
    p.add_argument("--total-env-steps", type=int, default=20_000)
    p.add_argument("--learning-starts", type=int, default=1_000)
    p.add_argument("--buffer-size", type=int, default=20_000)
    p.add_argument("--num-envs", type=int, default=1, help="envs stepped once per iteration")
    p.add_argument("--utd-ratio", type=float, default=1.0,
                   help="gradient steps per env step: utd_ratio * num_envs per iteration")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--activation", default="relu", help="hidden-layer activation")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--tau", type=float, default=0.005)
    p.add_argument("--target-entropy-scale", type=float, default=None,
                   help="Discrete actions: target entropy = scale * log|A| (None: the "
                        "library's default)")
    p.add_argument("--mark-every", type=int, default=1_000,
                   help="env steps between timestamps (jaxsac's log period)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--normalize-obs", action="store_true",
                   help="the library's running mean/std observation normalization")
    p.add_argument("--stop-at-return", type=float, default=None,
                   help="stop training after the first in-run evaluation at or above this "
                        "mean return (where the library can stop mid-run; the others run "
                        "to --total-env-steps). stable-baselines3 and sbx evaluate in-run "
                        "(10 deterministic episodes at every mark) only with this option")
    return p


def curve_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of learn_mujoco.py's runners: the run (env, seed, env steps), the
    common evaluation's period and episodes, and the library's own settings as JSON."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--env-id", required=True, help="gymnasium id, e.g. Hopper-v5")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--total-env-steps", type=int, default=100_000)
    p.add_argument("--eval-every", type=int, default=5_000,
                   help="env steps between common evaluations (a divisor of the total)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--settings", default="{}",
                   help="JSON object of the library's own settings for the run")
    return p


def check_curve_args(args: argparse.Namespace) -> dict[str, Any]:
    """Checks the runner's arguments; its settings, parsed."""
    if args.total_env_steps % args.eval_every:
        raise SystemExit(f"--total-env-steps={args.total_env_steps} must be a multiple of "
                         f"--eval-every={args.eval_every}")
    settings = json.loads(args.settings)
    if not isinstance(settings, dict):
        raise SystemExit(f"--settings must be a JSON object, got {args.settings!r}")
    return settings


def gradient_steps_per_iteration(args: argparse.Namespace) -> int:
    """utd_ratio * num_envs, which must be a whole number of gradient steps."""
    steps = args.utd_ratio * args.num_envs
    if steps < 1 or abs(steps - round(steps)) > 1e-9:
        raise SystemExit(f"--utd-ratio={args.utd_ratio} times --num-envs={args.num_envs} "
                         "must be a whole number of gradient steps per iteration")
    return round(steps)


def check_args(args: argparse.Namespace) -> None:
    if args.total_env_steps % args.mark_every or args.mark_every % args.num_envs:
        raise SystemExit(f"--total-env-steps={args.total_env_steps} must be a multiple of "
                         f"--mark-every={args.mark_every}, and that of --num-envs="
                         f"{args.num_envs}")
    least = steady_start(args.learning_starts, args.mark_every) + args.mark_every
    if args.total_env_steps < least:
        raise SystemExit(f"--total-env-steps={args.total_env_steps} must be at least {least}: "
                         "the first mark a whole period after learning starts, plus a period "
                         "(a steady window)")
    gradient_steps_per_iteration(args)


class Clock:
    """Timestamps (seconds since `start()`) at env-step marks."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.marks: dict[int, float] = {}
        self.t_end: float | None = None

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.marks.clear()

    def mark(self, env_steps: int) -> None:
        """Records the time env step `env_steps` was reached (the last call wins)."""
        self.marks[int(env_steps)] = time.perf_counter() - self.t0

    def stop(self) -> None:
        self.t_end = time.perf_counter() - self.t0


class CompileMeter:
    """Wall time spent in JAX tracing, lowering and XLA compilation.

    Listens to jax.monitoring's time spans for those phases and merges overlapping
    spans (a jit traced inside another's trace), so nothing is counted twice.
    """

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        import jax.monitoring

        def listener(event: str, start: float, end: float, **_: Any) -> None:
            if event in COMPILE_EVENTS:
                self.spans.append((start, end))

        jax.monitoring.register_event_time_span_listener(listener)

    def seconds(self, since: float | None = None, until: float | None = None) -> float:
        """Merged span length, optionally clipped to [since, until] (time.time() values)."""
        clipped = []
        for start, end in self.spans:
            if since is not None:
                start = max(start, since)
            if until is not None:
                end = min(end, until)
            if end > start:
                clipped.append((start, end))
        total, cur_start, cur_end = 0.0, None, None
        for start, end in sorted(clipped):
            if cur_end is None or start > cur_end:
                if cur_end is not None:
                    total += cur_end - cur_start
                cur_start, cur_end = start, end
            else:
                cur_end = max(cur_end, end)
        if cur_end is not None:
            total += cur_end - cur_start
        return total


def evaluate(policy: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int = 10,
             seed_base: int = EVAL_SEED_BASE) -> list[float]:
    """Returns of `episodes` deterministic episodes of gymnasium's `env_id`.

    policy: observations [episodes, obs_dim] float32 -> env actions [episodes, *action
    shape] (Pendulum-v1: torques [episodes, 1]; CartPole-v1: integers [episodes]).
    Episode i resets with seed `seed_base + i`: the same start states for every library.
    """
    import gymnasium as gym

    envs = [gym.make(env_id) for _ in range(episodes)]
    space = envs[0].action_space
    obs = np.stack([env.reset(seed=seed_base + i)[0] for i, env in enumerate(envs)])
    totals = np.zeros(episodes)
    done = np.zeros(episodes, bool)
    while not done.all():
        actions = np.asarray(policy(obs.astype(np.float32))).astype(space.dtype)
        actions = actions.reshape(episodes, *space.shape)
        for i, env in enumerate(envs):
            if done[i]:
                continue
            o, r, terminated, truncated, _ = env.step(actions[i])
            obs[i] = o
            totals[i] += float(r)
            done[i] = terminated or truncated
    for env in envs:
        env.close()
    return [round(float(x), 3) for x in totals]


class Curve:
    """The common evaluation (`evaluate`) at env-step marks during a run, timed apart from
    training: learn_mujoco.py's runners call it every --eval-every env steps, so that
    every library's curve comes from the same episodes (reset seeds 10000, 10001, ...)
    and its env steps/s leave the evaluations out."""

    def __init__(self, env_id: str, episodes: int) -> None:
        self.env_id, self.episodes = env_id, episodes
        self.env_steps: list[int] = []
        self.returns: list[list[float]] = []
        self.seconds = 0.0

    def __call__(self, env_steps: int, policy: Callable[[np.ndarray], np.ndarray]) -> float:
        """Evaluates `policy` at `env_steps` (the last call at a step wins); its mean."""
        start = time.perf_counter()
        returns = evaluate(policy, self.env_id, self.episodes)
        self.seconds += time.perf_counter() - start
        if self.env_steps and self.env_steps[-1] == env_steps:
            self.env_steps.pop(), self.returns.pop()
        self.env_steps.append(int(env_steps))
        self.returns.append(returns)
        return float(np.mean(returns))

    def record(self, wall_s: float, total_env_steps: int) -> dict[str, Any]:
        """The record's fields: the curve (env steps, mean and per-episode returns), the
        final return (the last evaluation's mean), the time of the run without the
        evaluations and its env steps/s."""
        train_s = wall_s - self.seconds
        return {
            "eval_env_steps": self.env_steps,
            "eval_mean": [round(float(np.mean(r)), 2) for r in self.returns],
            "eval_returns": self.returns,
            "eval_episodes": self.episodes,
            "final_return": round(float(np.mean(self.returns[-1])), 2) if self.returns
            else None,
            "wall_s": round(wall_s, 3),
            "eval_s": round(self.seconds, 3),
            "train_s": round(train_s, 3),
            "env_steps_per_s": round(total_env_steps / train_s, 2) if train_s > 0 else None,
        }


def evaluate_playground(policy: Callable[[Any], Any], env_id: str, episodes: int = 10,
                        seed_base: int = EVAL_SEED_BASE) -> list[float]:
    """Returns of `episodes` deterministic episodes of the MuJoCo Playground task of
    `env_id` ("playground/<task>"), the common final evaluation of the Playground tasks.

    The raw Playground env, loaded with MJX's JAX implementation (`config_overrides=
    {"impl": "jax"}`), without brax's or jaxsac's wrappers. Episode i resets with
    `jax.random.PRNGKey(seed_base + i)`; all episodes step together for up to the task's
    episode_length steps, and an episode's rewards are summed until Playground's `done`
    (a physics end; none for a task that cannot fail).

    policy: a JAX function (traced, not called on the host) from observations
    [episodes, obs_dim] float32 to env actions [episodes, action_size].
    """
    import jax
    import jax.numpy as jnp
    from mujoco_playground import registry

    if not env_id.startswith(PLAYGROUND_PREFIX):
        raise ValueError(f"evaluate_playground: {env_id!r} is not '{PLAYGROUND_PREFIX}<task>'")
    task = env_id[len(PLAYGROUND_PREFIX):]
    env = registry.load(task, config_overrides={"impl": "jax"})
    length = int(registry.get_default_config(task).episode_length)
    keys = jnp.stack([jax.random.PRNGKey(seed_base + i) for i in range(episodes)])

    def observe(state: Any) -> jax.Array:
        if not hasattr(state.obs, "reshape"):
            raise ValueError(f"evaluate_playground: {env_id} has dict observations "
                             f"({sorted(state.obs)}); only array observations are supported")
        return state.obs.reshape(episodes, -1).astype(jnp.float32)

    def run(keys: jax.Array) -> jax.Array:
        state = jax.vmap(env.reset)(keys)

        def step(carry, _):
            state, total, done = carry
            action = jnp.reshape(policy(observe(state)), (episodes, env.action_size))
            state = jax.vmap(env.step)(state, action)
            total = total + jnp.where(done, 0.0, state.reward)
            return (state, total, done | (state.done > 0)), None

        start = (state, jnp.zeros(episodes), jnp.zeros(episodes, bool))
        (_, total, _), _ = jax.lax.scan(step, start, None, length=length)
        return total

    totals = np.asarray(jax.jit(run)(keys), np.float64)
    return [round(float(x), 3) for x in totals]


def own_evaluations(args: argparse.Namespace, returns: Any) -> dict[str, Any]:
    """The record's fields of a library's own in-run evaluations, one per log period.

    returns: mean evaluation returns [seeds, periods]; period k ends at env step
    (k + 1) * mark_every.
    """
    returns = np.asarray(returns, np.float64).reshape(args.num_seeds, -1)
    return {
        "own_eval_env_steps": [(k + 1) * args.mark_every for k in range(returns.shape[1])],
        "own_eval_returns": [[round(float(x), 2) for x in seed] for seed in returns],
        "own_final_eval_return": [round(float(x), 2) for x in returns[:, -1]],
    }


def summarize(library: str, args: argparse.Namespace, clock: Clock,
              compile_meter: CompileMeter | None, eval_returns: list[list[float]],
              versions: dict[str, str], extra: dict[str, Any] | None = None,
              wall_clock_origin: float | None = None) -> dict[str, Any]:
    """The result record: timings from the marks, final returns per seed, versions.

    wall_clock_origin: time.time() at clock.start(), to place the steady window and the
    run's end on jax.monitoring's clock (compile time inside the steady window; compile
    time counted until the run's end, without the final evaluation's).
    """
    mark_start = steady_start(args.learning_starts, args.mark_every)
    mark_end = args.total_env_steps
    stopped = args.stop_at_return is not None and mark_end not in clock.marks
    if stopped and clock.marks:
        mark_end = max(clock.marks)  # stopped early: the window ends at the last mark
    missing = [m for m in (mark_start, mark_end) if m not in clock.marks]
    if missing and not stopped:
        raise RuntimeError(f"{library}: no timestamp at env steps {missing}; "
                           f"got {sorted(clock.marks)}")
    steady_s = rate = startup_s = None  # None: stopped before a whole steady window
    if not missing and mark_end > mark_start:
        steady_s = clock.marks[mark_end] - clock.marks[mark_start]
        rate = (mark_end - mark_start) / steady_s
        startup_s = clock.marks[mark_start] - (mark_start - args.learning_starts) / rate
    compile_s = compile_in_steady = None
    if compile_meter is not None:
        compile_s = compile_meter.seconds()
        if wall_clock_origin is not None:
            compile_s = compile_meter.seconds(until=wall_clock_origin + clock.t_end)
            if steady_s is not None:
                compile_in_steady = compile_meter.seconds(
                    wall_clock_origin + clock.marks[mark_start],
                    wall_clock_origin + clock.marks[mark_end])
    rounded = lambda x, digits: None if x is None else round(x, digits)  # noqa: E731
    means = [float(np.mean(r)) for r in eval_returns]
    record = {
        "library": library,
        "env_id": args.env_id,
        "seed": args.seed,
        "num_seeds": args.num_seeds,
        "total_env_steps": args.total_env_steps,
        "wall_s": round(clock.t_end, 3),
        "startup_s": rounded(startup_s, 3),
        "compile_s": rounded(compile_s, 3),
        "compile_in_steady_window_s": rounded(compile_in_steady, 3),
        "steady_window": [mark_start, mark_end],
        "steady_s": rounded(steady_s, 3),
        "steady_env_steps_per_s": rounded(rate, 2),
        "aggregate_env_steps_per_s": rounded(rate and rate * args.num_seeds, 2),
        "stopped_at_return": stopped,
        "clock_start_unix": wall_clock_origin,
        "marks": {str(k): round(v, 4) for k, v in sorted(clock.marks.items())},
        "eval_returns": eval_returns,
        "final_return": [round(m, 2) for m in means],
        "versions": versions,
        "python": platform.python_version(),
    }
    record.update(extra or {})
    return record


def emit(record: dict[str, Any]) -> None:
    """Prints the result as one JSON line (the last line of stdout)."""
    for key, value in record.items():
        if isinstance(value, float) and not math.isfinite(value):
            record[key] = None
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def package_versions(*names: str) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def run_sb3_api(sac_class: Any, library: str, args: argparse.Namespace,
                versions: dict[str, str], meter: CompileMeter | None,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Trains and evaluates `sac_class` (stable-baselines3's SAC or sbx's, which share
    SB3's API, replay buffer and collection loop) with the comparison's settings: one
    env, one gradient step per env step, ReLU (the settings of the Pendulum-v1 task)."""
    if (args.num_envs, args.utd_ratio, args.activation) != (1, 1.0, "relu"):
        raise SystemExit(f"{library}: the runner trains one env, one gradient step per env "
                         "step, ReLU networks only")
    if args.normalize_obs:
        raise SystemExit(f"{library}: --normalize-obs is not supported by this runner")
    from stable_baselines3.common.callbacks import BaseCallback

    clock = Clock()
    in_run: list[float] = []  # mean in-run evaluation returns, one per mark

    class Marks(BaseCallback):
        """A timestamp at every `mark_every` env steps (SB3 calls this after the env
        step and before that step's gradient step); with --stop-at-return, an in-run
        evaluation there too (its time counts, as the JAX libraries' in-run evaluations
        do), and the stop once it reaches the return."""

        def _on_step(self) -> bool:
            if self.num_timesteps % args.mark_every:
                return True
            if args.stop_at_return is not None:
                returns = evaluate(lambda obs: self.model.predict(obs, deterministic=True)[0],
                                   args.env_id, args.eval_episodes)
                in_run.append(float(np.mean(returns)))
            clock.mark(self.num_timesteps)
            return args.stop_at_return is None or in_run[-1] < args.stop_at_return

    wall_origin = time.time()
    clock.start()
    model = sac_class(
        "MlpPolicy", args.env_id,
        learning_rate=args.lr,
        buffer_size=args.buffer_size,
        learning_starts=args.learning_starts,
        batch_size=args.batch_size,
        tau=args.tau,
        gamma=args.gamma,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto",
        target_entropy="auto",
        policy_kwargs=dict(net_arch=list(args.hidden)),
        seed=args.seed,
        verbose=0,
        **({"device": "cpu"} if library == "sb3" else {}),
    )
    model.learn(total_timesteps=args.total_env_steps, callback=Marks())
    clock.stop()

    returns = [evaluate(lambda obs: model.predict(obs, deterministic=True)[0],
                        args.env_id, args.eval_episodes)]
    if in_run:
        extra = {**(extra or {}), **own_evaluations(args, [in_run])}
    return summarize(library, args, clock, meter, returns, versions, extra=extra,
                     wall_clock_origin=wall_origin)
