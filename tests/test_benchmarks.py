"""experiments/benchmarks: the benchmarks share only the harness and the peer tasks'
registry; the harness's reports and timings; the registry's tasks are consistent."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from experiments.benchmarks import harness, peer_tasks

BENCHMARKS = Path(__file__).resolve().parents[1] / "experiments" / "benchmarks"
PACKAGE = "experiments.benchmarks"
SHARED = {f"{PACKAGE}.harness", f"{PACKAGE}.peer_tasks"}
RUNNERS_SHARED = {f"{PACKAGE}.peer_runners.common"}


def module_name(path: Path) -> str:
    parts = path.relative_to(BENCHMARKS).with_suffix("").parts
    return ".".join((PACKAGE, *parts)).removesuffix(".__init__")


BENCHMARK_MODULES = {module_name(p) for p in BENCHMARKS.rglob("*.py")
                     if p.name != "__init__.py"}
"""The modules (not the packages, whose __init__ holds no code) of experiments/benchmarks."""


def imported_benchmark_modules(source: str, module: str) -> set[str]:
    """The modules of experiments/benchmarks that `source` (the text of `module`) imports,
    wherever the import is (a function, a try block); a bare `import harness` (a plain
    script's fallback) counts as importing the sibling module."""
    package = module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                sibling = f"{package}.{alias.name}"
                found.add(sibling if sibling in BENCHMARK_MODULES else alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(module.split(".")[:-node.level])
                origin = f"{base}.{node.module}" if node.module else base
            else:
                origin = node.module or ""
            found.add(origin)
            found.update(f"{origin}.{alias.name}" for alias in node.names)
    return {name for name in found if name in BENCHMARK_MODULES} - {module}


def forbidden_imports(source: str, module: str) -> set[str]:
    in_runners = module.startswith(f"{PACKAGE}.peer_runners.")
    allowed = SHARED | (RUNNERS_SHARED if in_runners else set())
    return imported_benchmark_modules(source, module) - allowed


@pytest.mark.parametrize("path", sorted(BENCHMARKS.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_benchmarks_import_only_the_harness_and_the_registry(path):
    assert forbidden_imports(path.read_text(), module_name(path)) == set()


@pytest.mark.parametrize("source", [
    "from experiments.benchmarks import compare_peers",
    "from experiments.benchmarks.bench_update import main",
    "import experiments.benchmarks.bench_train",
    "def f():\n    from experiments.benchmarks.peer_runners.common import evaluate",
    "try:\n    pass\nexcept ImportError:\n    import bench_update",
    "from .time_to_solve import summarize",
])
def test_the_import_rule_catches_each_kind_of_import(source):
    assert forbidden_imports(source, f"{PACKAGE}.bench_probe")


def test_runners_may_share_their_common_module():
    source = ("from experiments.benchmarks.peer_runners import common\n"
              "from experiments.benchmarks import harness, peer_tasks\n")
    assert forbidden_imports(source, f"{PACKAGE}.peer_runners.probe") == set()
    assert forbidden_imports(source, f"{PACKAGE}.bench_probe") == {
        f"{PACKAGE}.peer_runners.common"}


def test_markdown_table_aligns_each_column():
    assert harness.markdown_table(["library", "rate"], [["jaxsac", "1,000"]], "lr") == [
        "| library | rate |", "|---|---:|", "| jaxsac | 1,000 |"]
    assert harness.markdown_table(["a"], [])[1] == "|---|"


@pytest.mark.parametrize(("x", "digits", "text"), [
    (1234.56, 1, "1,234.6"), (1234.56, 0, "1,235"), (None, 1, "—"), (float("nan"), 1, "—"),
    (float("inf"), 0, "—")])
def test_number_formats_and_dashes_missing_values(x, digits, text):
    assert harness.number(x, digits) == text


def test_returns_and_ratios_as_the_tables_print_them():
    assert harness.signed(-250.4) == "−250" and harness.signed(475.0) == "475"
    assert harness.times(2.345) == "2.35×" and harness.times(None) == "—"


def test_write_report_writes_what_is_asked(tmp_path):
    report = {"value": 1.5, "rows": [1, 2]}
    written = harness.write_report(report, "# title\n\ntext", tmp_path / "a" / "r.json", None)
    assert written == [tmp_path / "a" / "r.json"]
    assert json.loads(written[0].read_text()) == report
    assert not (tmp_path / "r.md").exists()
    harness.write_report(report, "# title", None, tmp_path / "r.md")
    assert (tmp_path / "r.md").read_text() == "# title\n"


def test_machine_names_the_host_and_its_devices():
    host = harness.machine(devices=False)
    assert host["cores"] >= 1 and host["cpu"] and host["python"]
    assert "backend" not in host
    full = harness.machine("cpu")
    assert full["backend"] == "cpu" and full["device_count"] >= 1 and "gpu" not in full
    line = harness.machine_line(full)
    assert f"{full['cores']} cores" in line and f"jax {full['jax']} (cpu)" in line


def test_steady_periods_are_timed_after_the_first():
    calls = []

    def run_period(state, period):
        calls.append(period)
        return state + 1, None

    mean_s, first_s = harness.time_steady_periods(run_period, 0, periods=3)
    assert calls == [1, 2, 3, 4] and mean_s >= 0 and first_s >= 0


def test_interleaved_rounds_time_every_call_each_round():
    counts = {"a": 0, "b": 0}

    def call(name):
        counts[name] += 1

    ms = harness.interleaved_ms({name: lambda n=name: call(n) for name in counts}, rounds=4,
                                per_call=10)
    assert counts == {"a": 5, "b": 5}  # one warm-up call each, then one per round
    assert {name: len(v) for name, v in ms.items()} == {"a": 4, "b": 4}
    q = harness.quantiles({"a": [4.0, 1.0, 3.0, 2.0]})["a"]
    assert (q["min"], q["median"]) == (1.0, 2.5) and q["min"] <= q["q10"] <= q["q25"] <= 2.5


@pytest.mark.parametrize("name", list(peer_tasks.TASKS))
def test_every_task_runs_registered_libraries_with_their_own_settings(name):
    task = peer_tasks.TASKS[name]
    assert set(task.libraries) <= set(peer_tasks.LIBRARIES)
    assert set(task.solve.libraries) <= set(task.libraries)
    assert set(task.solve.own) == set(task.solve.libraries)


def test_frames_stored_once_save_the_stack_depth_of_every_stored_row():
    """bench_frames' two buffers differ by (k - 1) frames in each of the capacity rows
    and each env's row of last next observations, and by nothing else."""
    from experiments.benchmarks import bench_frames

    frame, k, capacity = (4, 5, 2), 3, 80
    for prioritized in (False, True):
        once = bench_frames.bytes_per_step(frame, k, capacity, prioritized) * capacity
        stacked = bench_frames.bytes_per_step((4, 5, 2 * k), 1, capacity, prioritized) * capacity
        assert stacked - once == (k - 1) * 4 * 5 * 2 * (capacity + bench_frames.NUM_ENVS)
        assert once > capacity * (4 * 5 * 2 + 4 * bench_frames.ACT_DIM + 4 + 1)
