"""DrQ's convolutional trunk on the CPU: flax's convolution against jaxsac's `conv2d`,
with and without jaxsac's XLA flag, and PyTorch's, alternated in one run.

    .venv/bin/python -m experiments.benchmarks.bench_conv [--rounds 3] [--batch 32]
        [--size 84] [--channels 9] [--steps 4]

The trunk: four 32-channel 3x3 unpadded convolutions, the first of stride 2, each with
ReLU, on float images [batch, size, size, channels] (DrQ's encoder without its Dense).
Timed, in ms: the forward pass alone (one jitted call); the gradient of the output's sum
with respect to the kernels and biases inside a `lax.scan` of `--steps` SGD steps (as
every training program runs it), per step; and the same gradient in one jitted call.
Variants, each in a fresh process per round, in a random order each round:
  - "flax": `flax.linen.Conv` (JAX's own convolution gradients);
  - "jaxsac": `jaxsac.networks.conv.Conv` (`conv2d`: its gradient as convolutions in
    the one layout XLA's CPU backend runs fast inside a loop);
  - each with jaxsac's flag on (`jaxsac.xla_flags.FAST_CONVOLUTIONS`, added on import)
    and off (XLA_FLAGS adding single convolutions back to the YNN fusions: the default);
  - "torch": the same trunk in PyTorch (peers' virtualenv, `torch.nn.functional.conv2d`,
    channels first, autograd; no scan: its loop is Python's).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

from experiments.benchmarks import harness

CHANNELS, STRIDES = (32, 32, 32, 32), (2, 1, 1, 1)
FLAG_OFF = "--xla_cpu_experimental_ynn_fusion_type=+individual_convolution"
VARIANTS = ("flax, flag off", "flax, flag on", "jaxsac, flag off", "jaxsac, flag on", "torch")


def jax_child(conv: str, args: argparse.Namespace) -> dict[str, float]:
    """{forward, gradient in scan, gradient}: ms of the trunk built with `conv` ("flax"
    or "jaxsac") in this process."""
    import flax.linen as nn
    import jax

    from jaxsac.networks.conv import CONV_INIT, Conv

    class Trunk(nn.Module):
        @nn.compact
        def __call__(self, x):
            for width, stride in zip(CHANNELS, STRIDES, strict=True):
                layer = (Conv(width, stride) if conv == "jaxsac" else
                         nn.Conv(width, (3, 3), (stride, stride), "VALID", kernel_init=CONV_INIT))
                x = nn.relu(layer(x))
            return x

    trunk = Trunk()
    x = jax.random.uniform(jax.random.key(0), (args.batch, args.size, args.size, args.channels))
    params = trunk.init(jax.random.key(1), x)
    grad = jax.grad(lambda p: trunk.apply(p, x).sum())

    def sgd_steps(params):
        def step(p, _):
            return jax.tree.map(lambda w, g: w - 1e-6 * g, p, grad(p)), None
        return jax.lax.scan(step, params, None, length=args.steps)[0]

    calls = {"forward": (jax.jit(lambda p: trunk.apply(p, x)), 1),
             "gradient in scan": (jax.jit(sgd_steps), args.steps),
             "gradient": (jax.jit(grad), 1)}
    ms = {}
    for name, (call, steps) in calls.items():
        ms[name] = harness.best_time(call, params, repeats=2) / steps * 1e3
    return ms


def torch_child(args: argparse.Namespace) -> dict[str, float]:
    """{forward, gradient}: ms of the trunk in PyTorch."""
    import torch

    torch.manual_seed(0)
    x = torch.rand(args.batch, args.channels, args.size, args.size)
    widths = (args.channels, *CHANNELS)
    kernels = [torch.randn(o, i, 3, 3, requires_grad=True)
               for i, o in zip(widths, CHANNELS, strict=False)]
    biases = [torch.zeros(o, requires_grad=True) for o in CHANNELS]

    def trunk():
        h = x
        for kernel, bias, stride in zip(kernels, biases, STRIDES, strict=True):
            h = torch.relu(torch.nn.functional.conv2d(h, kernel, bias, stride=stride))
        return h

    def best(fn):
        fn()
        times = []
        for _ in range(2):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times) * 1e3

    with torch.no_grad():
        forward = best(trunk)
    gradient = best(lambda: torch.autograd.grad(trunk().sum(), kernels + biases))
    return {"forward": forward, "gradient": gradient}


def child_round(variant: str, args: argparse.Namespace) -> dict[str, float]:
    """One variant's times, measured in a fresh process."""
    size_args = ["--batch", str(args.batch), "--size", str(args.size), "--channels",
                 str(args.channels), "--steps", str(args.steps)]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if variant == "torch":
        python, child = args.peers_python, "torch"
    else:
        python, child = sys.executable, variant.split(",")[0]
        if variant.endswith("off"):
            env["XLA_FLAGS"] = FLAG_OFF
    return harness.child_record(python, "experiments.benchmarks.bench_conv",
                                ["--child", child, *size_args], env)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=84)
    parser.add_argument("--channels", type=int, default=9)
    parser.add_argument("--steps", type=int, default=4, help="SGD steps in the timed scan")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--peers-python", default=str(harness.ROOT / ".venv-peers/bin/python"))
    parser.add_argument("--child", choices=("flax", "jaxsac", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        times = torch_child(args) if args.child == "torch" else jax_child(args.child, args)
        print(json.dumps(times))
        return

    load_before = harness.load_average()
    results: dict[str, dict[str, list[float]]] = {v: {} for v in args.variants}
    order, rng = list(args.variants), random.Random(0)
    for _ in range(args.rounds):
        rng.shuffle(order)
        for variant in order:
            for name, ms in child_round(variant, args).items():
                results[variant].setdefault(name, []).append(ms)
    report = {**harness.provenance(harness.command_line(
                  ".venv/bin/python -m experiments.benchmarks.bench_conv",
                  sys.argv[1:] if argv is None else argv), load_before),
              "images": [args.batch, args.size, args.size, args.channels],
              "ms": {v: harness.quantiles(times) for v, times in results.items()}}
    columns = ("forward", "gradient in scan", "gradient")
    rows = [[variant, *(harness.number(report["ms"][variant][c]["median"])
                        if c in report["ms"][variant] else "-" for c in columns)]
            for variant in args.variants]
    print(json.dumps(report, indent=1))
    print("\n".join(harness.markdown_table(
        ["trunk", *(f"{c}, ms (median)" for c in columns)], rows, "lrrr")))


if __name__ == "__main__":
    main()
