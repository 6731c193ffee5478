"""CI installs and runs what the README's quickstart tells a newcomer to, in its order, and pins nothing beforehand."""
from __future__ import annotations

import re

from support import ROOT


def _quickstart() -> list[str]:
    """The commands of the README's quickstart block."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the quickstart has a bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_ci_runs_the_quickstart_verbatim_in_order_with_nothing_installed_before_it():
    commands = _quickstart()
    assert commands == ["pip install -e . && ladd compare", 'pip install -e ".[dev]" && python -m pytest -q']
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    places = [lines.index(command) for command in commands]
    assert places == sorted(places), "the quickstart before the tests, as the README orders them"
    before = lines[: places[0]]
    installs = [line for line in before if "pip install" in line and "--upgrade pip" not in line]
    assert installs == [], f"nothing but pip itself is installed before the README's commands: {installs}"
    assert not any(re.search(r"\btorch\s*[=<>~]=", line) for line in lines), "CI pins no torch the README does not"
