"""The layering rules: the core (registry/) never imports the built-in components (ladd_plugins/), and each
built-in subpackage imports only the core, its toolkit and itself, as a third-party plugin would."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import ladd_plugins
import registry

CORE = Path(registry.__file__).parent
COMPONENTS = "ladd_plugins"
BUILTIN = Path(ladd_plugins.__file__).parent
#: top-level modules of ladd_plugins its subpackages may share: services of the built-in text and data
#: components (a third-party process, latent or sampler finds what it builds on in registry.toolkit)
SHARED = {
    "hub": "Hugging Face models, tokenizers and corpora with ladd's one error when missing (datasets, encoders, metrics)",
}


def _imported(tree: ast.AST, package: str = "") -> set[str]:
    """Modules a source of ``package`` imports anywhere (inside functions too), including ``import_module("...")`` calls.

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
        str(path.relative_to(CORE)): sorted(module for module in _imported(ast.parse(path.read_text())) if module.split(".")[0] == COMPONENTS)
        for path in CORE.rglob("*.py")
    }
    assert {name: modules for name, modules in offenders.items() if modules} == {}
    planted = ast.parse("def f():\n    from ladd_plugins.mdlm import x\n    importlib.import_module('ladd_plugins.datasets.text')\n")
    assert {"ladd_plugins.mdlm", "ladd_plugins.datasets.text"} <= _imported(planted), "the check must see planted imports"


@pytest.mark.slow
def test_importing_every_core_module_loads_no_component_module():
    modules = sorted(_module_name(path, CORE) for path in CORE.rglob("*.py"))
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
    """(importer, imported) -> the modules of each built-in subpackage that import another subpackage or unshared module."""
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
    assert _imported(planted, "ladd_plugins.samplers") >= {"ladd_plugins.processes.masked", "ladd_plugins.hub", "ladd_plugins.samplers.common"}


def test_shared_top_level_modules_exist():
    assert all((BUILTIN / f"{name}.py").is_file() for name in SHARED)
