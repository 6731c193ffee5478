"""The layering rule: the core (registry/) never imports the built-in components (ladd_plugins/)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import registry

CORE = Path(registry.__file__).parent
COMPONENTS = "ladd_plugins"


def _imported(tree: ast.AST) -> set[str]:
    """Modules a source imports anywhere (inside functions too), including ``import_module("...")`` calls."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if function in ("import_module", "__import__"):
                found.add(str(node.args[0].value))
    return found


def test_no_core_module_imports_the_components_in_its_source():
    offenders = {
        path.name: sorted(module for module in _imported(ast.parse(path.read_text())) if module.split(".")[0] == COMPONENTS)
        for path in CORE.glob("*.py")
    }
    assert {name: modules for name, modules in offenders.items() if modules} == {}
    planted = ast.parse("def f():\n    from ladd_plugins.mdlm import x\n    importlib.import_module('ladd_plugins.text')\n")
    assert {"ladd_plugins.mdlm", "ladd_plugins.text"} <= _imported(planted), "the check must see planted imports"


@pytest.mark.slow
def test_importing_every_core_module_loads_no_component_module():
    modules = sorted(f"registry.{path.stem}" for path in CORE.glob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for module in {modules!r}:\n    importlib.import_module(module)\n"
        f"print(sorted(name for name in sys.modules if name.split('.')[0] == {COMPONENTS!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
