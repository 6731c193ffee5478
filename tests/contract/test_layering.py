"""The layering rules: the core (registry/) never imports the built-in components (ladd_plugins/), and each
built-in subpackage imports only the core, its toolkit and itself, as a third-party plugin would."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from support import TINY

import ladd_plugins
import registry

CORE = Path(registry.__file__).parent
COMPONENTS = "ladd_plugins"
BUILTIN = Path(ladd_plugins.__file__).parent
#: top-level modules of ladd_plugins its subpackages may share: services of the built-in text and data
#: components (a third-party process, latent or sampler finds what it builds on in registry.toolkit)
SHARED = {
    "hub": "Hugging Face models, tokenizers and corpora with ladd's one error when missing (datasets, encoders, "
        "metrics)",
}


def _imported(tree: ast.AST, package: str = "") -> set[str]:
    """Modules a source of ``package`` imports anywhere (inside functions too), including ``import_module("...")``
    calls.

    Relative imports are resolved against ``package``; ``from PACKAGE import name`` also counts ``PACKAGE.name``.
    """
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.level == 0 or package):
            base = package.split(".")
            parts = base[: len(base) - node.level + 1] if node.level else []
            module = ".".join(parts + ([node.module] if node.module else []))
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if function in ("import_module", "__import__"):
                found.add(str(node.args[0].value))
    return found


def test_no_core_module_imports_the_components_in_its_source():
    offenders = {
        str(path.relative_to(CORE)): sorted(
            module for module in _imported(ast.parse(path.read_text())) if module.split(".")[0] == COMPONENTS
        )
        for path in CORE.rglob("*.py")
    }
    assert {name: modules for name, modules in offenders.items() if modules} == {}
    planted = ast.parse(
        "def f():\n    from ladd_plugins.mdlm import x\n    importlib.import_module('ladd_plugins.datasets.text')\n"
    )
    assert {"ladd_plugins.mdlm", "ladd_plugins.datasets.text"} <= _imported(planted), (
        "the check must see planted imports"
    )


@pytest.mark.slow
def test_importing_every_core_module_loads_no_component_module():
    modules = sorted(_module_name(path, CORE) for path in CORE.rglob("*.py") if path.name != "__main__.py")
    code = (
        "import importlib, sys\n"
        f"for module in {modules!r}:\n    importlib.import_module(module)\n"
        f"print(sorted(name for name in sys.modules if name.split('.')[0] == {COMPONENTS!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _subpackage_imports() -> dict[tuple[str, str], set[str]]:
    """(importer, imported) -> the modules of each built-in subpackage that import another subpackage or unshared
    module."""
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted(BUILTIN.glob("*/**/*.py")):
        module = _module_name(path, BUILTIN)
        own = module.split(".")[1]
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for imported in _imported(ast.parse(path.read_text()), package):
            parts = imported.split(".")
            if parts[0] == COMPONENTS and len(parts) > 1 and parts[1] not in (own, *SHARED):
                found.setdefault((own, parts[1]), set()).add(module)
    return found


def test_no_builtin_subpackage_imports_another_ones_modules():
    assert (BUILTIN / "samplers" / "joint.py").is_file(), "the check must see the subpackages"
    assert _subpackage_imports() == {}, "import what is shared from registry.toolkit (see docs/plugins.md)"
    planted = ast.parse("from ..processes.masked import MaskedProcess\nfrom .. import hub\nfrom .common import x\n")
    assert _imported(planted, "ladd_plugins.samplers") >= {
        "ladd_plugins.processes.masked",
        "ladd_plugins.hub",
        "ladd_plugins.samplers.common",
    }


def test_shared_top_level_modules_exist():
    assert all((BUILTIN / f"{name}.py").is_file() for name in SHARED)


#: The core's wings from the lowest layer to the highest: a module imports only its own layer and those below.
#: The plugin contract (the modules at the top of registry/) is the lowest; ``registry/__init__.py`` and
#: ``registry/testing.py`` are its public face and may name the machinery.
WINGS = (
    "contract", "host", "storage", "config", "engine", "training", "conformance", "paper", "sweeps", "harness", "cli",
)
FACES = ("registry", "registry.testing")


def _wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else "contract"  # the toolkit is part of the contract


def _runtime_imports(path: Path, module: str) -> set[str]:
    """The core modules ``path`` imports at run time (inside functions too; not under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
        for statement in block.body
        for node in ast.walk(statement)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    pruned = ast.Module(
        body=[n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in typing_only],
        type_ignores=[],
    )
    return {name for name in _imported(pruned, package) if name.split(".")[0] == "registry"}


def core_graph(root: Path = CORE) -> dict[str, set[str]]:
    """Core module -> the core modules it imports at run time (``from package import module`` counts the module)."""
    modules = {_module_name(path, root): path for path in root.rglob("*.py")}
    return {
        module: {name for name in _runtime_imports(path, module) if name in modules and name != module}
        for module, path in modules.items()
    }


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports that run from a lower wing to a higher one, or from the contract to its public face."""
    rank = {wing: index for index, wing in enumerate(WINGS)}
    return sorted(
        f"{module} ({_wing(module)}) imports {imported} ({_wing(imported)})"
        for module, imports in graph.items()
        if module not in FACES
        for imported in imports
        if imported in FACES[1:] or rank[_wing(imported)] > rank[_wing(module)]
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_every_wing_imports_only_its_own_layer_and_the_ones_below():
    graph = core_graph()
    assert {_wing(module) for module in graph} == set(WINGS), "the check must see every wing"
    assert layer_violations(graph) == []
    planted = {**graph, "registry.host.kinds": graph["registry.host.kinds"] | {"registry.engine.model"}}
    assert layer_violations(planted) == ["registry.host.kinds (host) imports registry.engine.model (engine)"]


def test_the_core_has_no_import_circle():
    graph = core_graph()
    assert cycles(graph) == []
    planted = {**graph, "registry.errors": graph["registry.errors"] | {"registry.host.kinds"}}
    assert any({"registry.errors", "registry.host.kinds"} <= set(circle) for circle in cycles(planted))


def _modules_loaded(code: str) -> set[str]:
    """The top-level packages loaded after running ``code`` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(sorted({{n.split('.')[0] for n in sys.modules}}))"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return set(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_the_host_and_the_listing_commands_import_no_torch():
    host = sorted(name for name in core_graph() if _wing(name) == "host")
    assert "torch" not in _modules_loaded(
        "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in host)
    )
    for command in (["list-components"], ["plugins"], ["show", "backbone", "dit"]):
        quietly = (
            "import contextlib, io\nfrom registry.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
        )
        loaded = _modules_loaded(f"{quietly}    assert main({command!r}) == 0")
        assert "torch" not in loaded, command


@pytest.mark.slow
def test_reading_sampling_and_exporting_a_run_import_no_lightning(tmp_path):
    run = tmp_path / "run"
    trained = subprocess.run(
        [
            sys.executable,
            "-m",
            "registry.cli",
            "train",
            "experiment=binsaw/mdlm_cpu",
            *TINY,
            "train.stages=[{steps:2}]",
            f"run_dir={run}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert trained.returncode == 0, trained.stderr
    read = f"from registry import load\nfrom registry.engine.loading import load_run\nload_run({str(run)!r}, load())"
    assert "lightning" not in _modules_loaded(read)
    for command in (
        ["sample", str(run), "--num", "2", "--steps", "2", "--out", str(tmp_path / "s.txt")],
        ["export", str(run), str(tmp_path / "model")],
    ):
        loaded = _modules_loaded(f"from registry.cli import main\nassert main({command!r}) == 0")
        assert "lightning" not in loaded and "torch" in loaded, command
