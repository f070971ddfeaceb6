"""The package's layers: every module imports only from lower layers (or from its own
subpackage), never from inside a function, and the imports form no cycle.

The layers are those of docs/architecture.md; a new module must be placed in one here.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jaxsac"

LAYERS = (
    ("records", ("types", "checks", "xla_flags")),
    ("observations", ("observations",)),
    ("frames", ("frames",)),
    ("fields", ("field_roles", "learner_fields", "run_fields", "runner_fields")),
    ("config", ("config",)),
    ("components", ("envs", "networks", "noise", "connectors", "agents", "logger",
                    "distributed", "compilation", "tuned", "random_bits", "storage",
                    "memory")),
    ("pieces", ("replay", "learner", "runners", "sharding", "runs", "return_scale")),
    ("schedule", ("schedule", "metrics")),
    ("assembly", ("assembly",)),
    ("shared steps", ("iteration", "evaluation")),
    ("loops", ("jax_loop", "host_loop", "checkpoint")),
    ("entry points", ("train", "policy")),
    ("media", ("video",)),
)
LAYER_OF = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}


def modules() -> dict[str, ast.Module]:
    """{"jaxsac.x.y": parsed source} for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = ast.parse(path.read_text(), filename=str(path))
    return found


MODULE_NAMES = {
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in PACKAGE.rglob("*.py")}


def jaxsac_imports(module_name: str, tree: ast.Module) -> list[tuple[str, ast.AST, bool]]:
    """(imported jaxsac module, node, at module level) for each import of jaxsac."""
    top_level = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from jaxsac.x import y` imports the module jaxsac.x.y when there is one,
            # else the name y of the module jaxsac.x.
            names = [f"{node.module}.{alias.name}"
                     if f"{node.module}.{alias.name}" in MODULE_NAMES else node.module
                     for alias in node.names]
        out += [(name, node, id(node) in top_level) for name in names
                if name == "jaxsac" or name.startswith("jaxsac.")]
    return out


def unit_of(module_name: str) -> str | None:
    """The layered unit of a module: jaxsac.replay.episode -> "replay"."""
    parts = module_name.split(".")
    return parts[1] if len(parts) > 1 else None


ALL = modules()


def test_every_module_has_a_layer():
    units = {unit_of(name) for name in ALL} - {None}
    assert sorted(units - set(LAYER_OF)) == [], "place new modules in LAYERS"


@pytest.mark.parametrize("name", sorted(n for n in ALL if n != "jaxsac"))
def test_imports_only_from_lower_layers_at_module_level(name):
    unit = unit_of(name)
    problems = []
    for imported, node, top_level in jaxsac_imports(name, ALL[name]):
        if not top_level:
            problems.append(f"line {node.lineno}: {imported} imported inside a function")
            continue
        target = unit_of(imported)
        if target is None:
            problems.append(f"line {node.lineno}: imports the package jaxsac itself")
        elif target == unit:
            continue  # within its own subpackage
        elif LAYER_OF[target] >= LAYER_OF[unit]:
            problems.append(f"line {node.lineno}: {imported} is in layer "
                            f"{LAYERS[LAYER_OF[target]][0]!r}, not below {unit!r}'s "
                            f"{LAYERS[LAYER_OF[unit]][0]!r}")
    assert problems == []


def test_imports_form_no_cycle():
    graph = {}
    for name, tree in ALL.items():
        targets = set()
        for imported, _, _ in jaxsac_imports(name, tree):
            while imported not in ALL:  # `from jaxsac.x import name`: the module jaxsac.x
                imported = imported.rsplit(".", 1)[0]
            targets.add(imported)
        graph[name] = targets - {name}
    # A package's __init__ imports its own modules; that is no cycle unless they import
    # the package back, which the layer test forbids for jaxsac and the walk finds here.
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_storage_knows_nothing_of_sac():
    """The checkpoint storage (items, checksums, Orbax steps) imports no jaxsac module
    above the components layer: the SAC checkpoint schema lives in jaxsac.checkpoint."""
    components = LAYER_OF["storage"]
    assert LAYERS[components][0] == "components"
    imported = [name for name, _, _ in jaxsac_imports("jaxsac.storage", ALL["jaxsac.storage"])]
    above = [name for name in imported
             if unit_of(name) is None or LAYER_OF[unit_of(name)] > components]
    assert imported and above == []


def test_the_check_sees_a_violation():
    """The checks above fail on a module that imports upward or inside a function."""
    source = "from jaxsac.train import train\n\ndef f():\n    import jaxsac.jax_loop\n"
    found = jaxsac_imports("jaxsac.networks", ast.parse(source))
    assert [(name, top) for name, _, top in found] == [("jaxsac.train", True),
                                                       ("jaxsac.jax_loop", False)]
    assert LAYER_OF[unit_of("jaxsac.train")] > LAYER_OF[unit_of("jaxsac.networks")]


MAX_MODULE_LINES = 450


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_module_stays_short(name):
    """A module over MAX_MODULE_LINES lines does more than one job: split it."""
    path = PACKAGE.parent.joinpath(*name.split(".")).with_suffix(".py")
    if not path.exists():
        path = PACKAGE.parent.joinpath(*name.split("."), "__init__.py")
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES
