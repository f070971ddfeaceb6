"""The quickstart notebook runs top to bottom (small step count) in a fresh kernel."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "experiments" / "notebooks" / "quickstart.ipynb"


def small_settings(checkpoint_dir: Path) -> dict[str, str]:
    return {"TOTAL_ENV_STEPS": "400", "NUM_SEEDS": "2", "LOG_EVERY": "200",
            "HIDDEN_SIZES": "(32, 32)", "EVAL_EPISODES": "2",
            "CHECKPOINT_DIR": repr(str(checkpoint_dir))}


def with_settings(notebook, settings: dict[str, str]):
    """The notebook with the top settings cell's assignments replaced."""
    cell = next(c for c in notebook.cells if c.cell_type == "code")
    for name, value in settings.items():
        cell.source, count = re.subn(rf"^{name} = .*$", f"{name} = {value}", cell.source,
                                     flags=re.MULTILINE)
        assert count == 1, f"the first code cell of {NOTEBOOK} sets {name} {count} times"
    return notebook


def test_quickstart_notebook_runs_top_to_bottom(tmp_path):
    checkpoint_dir = tmp_path / "checkpoints"
    notebook = with_settings(nbformat.read(NOTEBOOK, as_version=4),
                             small_settings(checkpoint_dir))
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) == 2  # learning curves, angle trace
    text = "".join(o.get("text", "") for o in outputs)
    assert "latest step: 400" in text
    assert "restored 2 seeds at env step 400" in text
    assert re.search(r"seed 1: return +-?\d", text)
    assert (checkpoint_dir / "400").is_dir()
