"""The README's Python examples run as they are written, in order, in one namespace (a
later example uses what an earlier one defined), with `jaxsac.tuned`'s configs shrunk
to two log periods of small networks.

They run in a child process whose XLA compiles for speed of compilation
(`--xla_backend_optimization_level=0`: the same programs, less optimized machine code),
since compiling the examples' six training programs is what takes the time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SMALL = dict(hidden_sizes=(16, 16), batch_size=16, buffer_capacity=960, learning_starts=40,
             log_every=120, total_env_steps=240, eval_episodes=1)
"""What a README example's `jaxsac.tuned(...)` gets on top of its own arguments: two
log periods of small networks (the step counts divide by the examples' num_envs)."""
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def run_examples() -> dict:
    """Run the README's python blocks in order in one namespace (in the current
    folder), `jaxsac.tuned` shrunk by SMALL; a summary of what they left behind."""
    import jaxsac

    original = jaxsac.tuned.tuned
    shrunk = []

    def small_tuned(env_id, **overrides):
        shrunk.append(env_id)
        return original(env_id, **{**overrides, **SMALL})

    jaxsac.tuned.tuned = small_tuned
    namespace: dict = {}
    blocks = python_blocks(README.read_text())
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md python block {i}", "exec"), namespace)  # noqa: S102
    return {"blocks": len(blocks), "shrunk": shrunk, "policy_step": namespace["policy"].step,
            "step": namespace["step"], "returns_shape": list(namespace["returns"].shape),
            "eval_return_shape": list(namespace["metrics"]["eval_return"].shape)}


def test_the_blocks_are_found():
    blocks = python_blocks("a\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny\n```\n")
    assert blocks == ["x = 1\n", "y\n"]


def test_the_readme_python_examples_run_as_written(tmp_path):
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", "import json; from tests.test_readme import run_examples; "
         "print(json.dumps(run_examples()))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["blocks"] >= 5
    assert out["shrunk"][0] == "Pendulum-v1" and "MultiAgentPendulum-v1" in out["shrunk"]
    # What the examples leave behind is what they say.
    assert out["policy_step"] == out["step"] == SMALL["total_env_steps"]
    assert out["returns_shape"] == [10]  # evaluate's default number of episodes
    assert out["eval_return_shape"] == [8, 2, 2]  # seeds, log periods, agents
    assert (tmp_path / "runs" / "example" / "checkpoints" / "run.json").exists()
