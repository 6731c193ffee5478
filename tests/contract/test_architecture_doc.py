"""docs/architecture.md names only what exists: its paths, modules and names, its tables of the contract and the
wings (every module listed, each name defined where the row says), and the wings' order the layering test enforces."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from contract.test_layering import WINGS
from support import ROOT

import registry.interfaces

DOC = ROOT / "docs" / "architecture.md"
CORE = ROOT / "registry"
#: where the project's files live (the virtual environment and caches are not the project's)
PROJECT = [p for p in ROOT.rglob("*") if not {".venv", ".git", "__pycache__"} & set(p.relative_to(ROOT).parts)]
_PLACEHOLDER = re.compile(r"stageN|RUN_DIR|METHOD|NAME|<")


def spans(text: str) -> list[str]:
    """The text of every code span (between backticks) of ``text``."""
    return re.findall(r"`([^`\n]+)`", text)


def exists(path: str) -> bool:
    """Whether some file or folder of the project ends with ``path`` (whole parts: ``host/kinds.py``, ``binsaw/``)."""
    wanted = Path(path.rstrip("/")).parts
    return any(p.relative_to(ROOT).parts[-len(wanted):] == wanted for p in PROJECT)


def defines(source: str, name: str) -> bool:
    """Whether ``source`` defines or imports ``name`` (a function, class, method, assignment or imported name)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and name in {a.asname or a.name for a in node.names}:
            return True
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def table(heading: str, columns: int) -> list[list[str]]:
    """The rows (cells stripped) of the first table after ``heading``, header and rule left out."""
    text = DOC.read_text()
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == columns, line
        rows.append(cells)
    return rows


def test_every_path_the_document_names_exists():
    named = [s for s in spans(DOC.read_text()) if re.fullmatch(r"[\w./-]+", s) and ("/" in s or s.endswith(".py"))]
    assert len(named) > 40, "the check must see the document's paths"
    assert [s for s in named if not _PLACEHOLDER.search(s) and not exists(s)] == []
    assert not exists("registry/assembly.py") and exists("engine/assembly.py"), "the check must tell a stale path"


def test_every_module_and_member_the_document_names_exists():
    found = spans(DOC.read_text())
    dotted = [s.removesuffix("()") for s in found if re.fullmatch(r"registry(\.\w+)+(\(\))?", s) and ".py" not in s]
    members = [s.removesuffix("()") for s in found if re.fullmatch(r"[A-Z]\w+\.\w+(\(\))?", s)]
    assert dotted and members, "the check must see dotted names"
    missing = [name for name in dotted if not _importable(name)]
    missing += [m for m in members if hasattr(registry.interfaces, m.split(".")[0]) and not _has(m)]
    assert missing == []
    assert not _importable("registry.assembly") and not _has("Dataset.no_such_member")


def _importable(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def _has(member: str) -> bool:
    owner, name = member.split(".")
    return hasattr(getattr(registry.interfaces, owner), name)


def test_every_name_said_to_live_in_a_file_is_defined_there():
    pairs = re.findall(r"`([\w/]+\.py)`'s\s+`([\w.]+)", DOC.read_text())
    assert len(pairs) > 8, "the check must see the document's `FILE`'s `NAME` pairs"
    missing = []
    for file, name in pairs:
        paths = [p for p in CORE.rglob("*.py") if p.relative_to(CORE).as_posix().endswith(file)]
        assert len(paths) == 1, file
        source = paths[0].read_text()
        missing += [f"{file}: {part}" for part in name.split(".") if not defines(source, part)]
    assert missing == []


CONTRACT_NAMES = "".join(p.read_text() for p in [*CORE.glob("*.py"), *(CORE / "toolkit").glob("*.py")])


def _identifiers(cell: str) -> list[str]:
    """The code spans of ``cell`` that are names of code (with a capital or an underscore: not a plain word)."""
    return [s for s in spans(cell) if re.fullmatch(r"[A-Za-z_]\w*", s) and re.search(r"[A-Z_]", s)]


def test_the_contract_table_lists_each_top_level_module_and_what_it_defines():
    rows = table("### The contract (top level)", 2)
    listed = {Path(m.rstrip("/")).name for row in rows for m in spans(row[0])}
    assert listed == {p.stem if p.is_dir() else p.name for p in CORE.iterdir() if _is_module(p)}
    missing = []
    for cells in rows:
        files = [CORE / m for m in spans(cells[0])]
        source = "".join(p.read_text() for f in files for p in ([f] if f.is_file() else f.glob("*.py")))
        for name in _identifiers(cells[1]):
            submodule = any((f / f"{name}.py").is_file() for f in files if f.is_dir())
            if not submodule and not defines(source, name):
                missing.append(f"{cells[0]}: {name}")
    assert missing == []


def _is_module(path: Path) -> bool:
    return (path.suffix == ".py" and path.name != "__main__.py") or (path / "__init__.py").is_file() and not any(
        path.name == wing for wing in WINGS
    )


def test_the_wings_table_lists_every_module_of_every_wing_and_what_it_defines():
    rows, wing, missing, listed = table("### The wings", 3), "", [], set()
    for cells in rows:
        wing = cells[0].strip("`/") or wing
        files = [CORE / wing / m for m in spans(cells[1]) if m.endswith(".py")]
        listed |= {f.relative_to(CORE).as_posix() for f in files}
        assert all(f.is_file() for f in files), cells[1]
        if "one module per command" in cells[1]:
            from registry.cli import COMMANDS

            files += [Path(command.__file__) for command in COMMANDS]
            listed |= {Path(command.__file__).relative_to(CORE).as_posix() for command in COMMANDS}
        source = "".join(f.read_text() for f in files)
        missing += [f"{wing}/: {n}" for n in _identifiers(cells[2]) if not defines(source + CONTRACT_NAMES, n)]
    assert missing == []
    every = {p.relative_to(CORE).as_posix() for w in WINGS[1:] for p in (CORE / w).glob("*.py") if _holds_code(p)}
    assert sorted(every - listed - {"cli/__main__.py"}) == []


def _holds_code(path: Path) -> bool:
    """Whether a module holds more than a docstring (a package's ``__init__.py`` often holds nothing else)."""
    body = [node for node in ast.parse(path.read_text()).body if not isinstance(node, ast.Expr)]
    return any(not (isinstance(node, ast.ImportFrom) and node.module == "__future__") for node in body)


def test_the_diagram_orders_the_wings_as_the_layering_test_does():
    arrow = next(line for line in DOC.read_text().splitlines() if "──>" in line)
    assert [part.strip() for part in arrow.split("──>")] == list(reversed(WINGS))


def test_the_slots_the_document_lists_are_the_slot_table_in_its_order():
    from registry.host.kinds import SLOTS

    listed = re.search(r"`host/kinds.py`'s `SLOTS`\): (.*?); the", DOC.read_text(), re.S)[1]
    assert [s for s in spans(listed) if s.islower()] == list(SLOTS)
