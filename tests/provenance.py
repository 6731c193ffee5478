"""How each committed results folder was produced, and whether the current code still produces it.

Every committed folder of ``results/`` and ``bench/results/`` (one that holds a file git tracks; what a command
such as the quickstart writes there is not checked) holds ``provenance.json`` (and, for results, a README; speed
figures are described in ``bench/RESULTS.md``): records, each covering some of the folder's files, with the commit,
date, torch version, machine and commands that produced them and, for results (not speed figures), the fingerprint
(``fingerprints.py``) of every case whose code produced them, computed by the code that produced them.
``test_provenance.py`` runs each case again with the current code and compares (within the fingerprints' measured
tolerance): a change of behaviour fails until the results are produced again or the folder's README says, in the
record's own words, that they are stale. A stale record may keep ``null`` for a fingerprint of a retired format.

Write a record after producing results (fingerprints are computed from the code that is imported: that of the
commit that produced them)::

    python tests/provenance.py FOLDER --cases binsaw/mdlm_cpu,... --command "ladd compare ..." [--command ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from fingerprints import CASES, computed, differences, record

FILE = "provenance.json"
README = "README.md"
FORMAT = "ladd-provenance/2"
#: results reproduce numbers and name fingerprint cases; speed figures measure time, which no fingerprint covers
MEASURES = ("results", "speed")
_FIELDS = {"files": list, "commit": str, "date": str, "torch": str, "machine": str, "commands": list, "measures": str}


def read(folder: Path) -> list[dict[str, Any]]:
    """The records of ``folder``'s provenance file."""
    document = json.loads((folder / FILE).read_text())
    if document.get("format") != FORMAT or not isinstance(document.get("records"), list):
        raise ValueError(f"{folder / FILE} is not a record file of format {FORMAT!r}")
    return document["records"]


#: how a record's fingerprint case is computed with the current code (``fingerprints.computed``; tests pass another)
Compute = Callable[[str], dict[str, Any]]


def _record_problems(where: str, entry: dict[str, Any], compute: Compute, readme: str) -> list[str]:
    problems = [
        f"{where}: {key} must be a {kind.__name__}"
        for key, kind in _FIELDS.items()
        if not isinstance(entry.get(key), kind)
    ]
    if problems:
        return problems
    if not re.fullmatch(r"[0-9a-f]{7,40}", entry["commit"]):
        problems.append(f"{where}: commit {entry['commit']!r} is not a commit hash")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"]):
        problems.append(f"{where}: date {entry['date']!r} is not YYYY-MM-DD")
    if entry["measures"] not in MEASURES or not entry["commands"]:
        problems.append(f"{where}: measures must be one of {', '.join(MEASURES)} and commands may not be empty")
    found = entry.get("fingerprints", {})
    stale = entry.get("stale", {})
    if entry["measures"] == "results" and not found:
        problems.append(f"{where}: results name the fingerprint cases of the code that produced them (fingerprints)")
    for case, fingerprint in found.items():
        if case not in CASES:
            problems.append(f"{where}: {case!r} is no fingerprint case: add it to tests/fingerprints.py's CASES")
        elif fingerprint is None:
            if case not in stale:
                problems.append(f"{where}: {case!r} has no fingerprint: record the one of the code that produced them")
        elif not isinstance(fingerprint, dict):
            problems.append(f"{where}: the fingerprint of {case!r} must be the case's record (tests/fingerprints.py)")
        else:
            changed = differences(compute(case), fingerprint)
            if not changed and case in stale:
                problems.append(f"{where}: {case!r} is reproduced by the current code, but the record calls it stale")
            elif changed and case not in stale:
                shown = "; ".join(changed[:3]) + ("; ..." if len(changed) > 3 else "")
                problems.append(
                    f"{where}: the code of {case!r} changed since these results were produced ({entry['commit']}): "
                    f"{len(changed)} numbers differ ({shown}): produce them again, or add a stale note for it to the "
                    f"record and to {README}"
                )
    for case, note in stale.items():
        if case not in found:
            problems.append(f"{where}: stale note for {case!r}, which the record does not name")
        elif note not in readme:
            problems.append(f"{where}: the stale note for {case!r} is missing from {README}: {note}")
    return problems


def problems(folder: Path, compute: Compute = computed) -> list[str]:
    """Why ``folder``'s record is missing, incomplete or no longer reproduced by the current code (empty: none)."""
    if not (folder / FILE).is_file():
        return [f"{folder} has no {FILE}"]
    records = read(folder)
    readme = (folder / README).read_text() if (folder / README).is_file() else None
    if readme is None and any(entry.get("measures") != "speed" for entry in records):
        return [f"{folder} has no {README} saying what its results are"]
    found: list[str] = []
    covered: list[str] = []
    for index, entry in enumerate(records):
        found += _record_problems(f"{folder / FILE} record {index}", entry, compute, readme or "")
        covered += entry.get("files", [])
    files = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in (FILE, README))
    found += [f"{folder}: {name} is covered by no record" for name in files if name not in covered]
    found += [
        f"{folder}: {name} is covered by {covered.count(name)} records"
        for name in set(covered)
        if covered.count(name) > 1
    ]
    found += [f"{folder}: a record covers {name}, which is not there" for name in set(covered) - set(files)]
    return found


def cases(folder: Path) -> set[str]:
    """The fingerprint cases ``folder``'s records name with a fingerprint to compare."""
    if not (folder / FILE).is_file():
        return set()
    return {case for entry in read(folder) for case, found in entry.get("fingerprints", {}).items() if found}


def result_folders(root: Path) -> list[Path]:
    """Every folder of ``results/`` and ``bench/results/`` that holds a file git tracks in ``root``'s checkout (outside
    a git checkout, every such folder that holds a file)."""
    try:
        tracked = _git("ls-files", "-z", "--", "results", "bench/results", cwd=root).split("\0")
    except (OSError, subprocess.CalledProcessError):  # no git, or no checkout: a copy of the files
        found = [p.parent for base in ("results", "bench/results") for p in (root / base).rglob("*") if p.is_file()]
        return sorted(set(found))
    return sorted({(root / name).parent for name in tracked if name})


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=cwd).stdout.strip()


def _machine() -> str:
    card = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{platform.machine()}, {os.cpu_count()} cores, {card}"


def write(
    folder: Path,
    cases: list[str],
    commands: list[str],
    machine: str,
    files: list[str] | None = None,
    commit: str | None = None,
) -> dict[str, Any]:
    """Add (or replace) the record of ``files`` (default: all of the folder's) produced by the code imported now.

    ``commit`` names the code when it is not this checkout's (a copy of one commit); otherwise the checkout's
    HEAD, which must have no uncommitted changes outside the results.
    """
    if commit is None and _git(
        "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results", ":!bench/results"
    ):
        raise SystemExit(
            "the checkout has uncommitted changes outside the results: commit them first, so the record names the code"
        )
    files = files or sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in (FILE, README))
    entry = {
        "files": files,
        "commit": commit or _git("rev-parse", "HEAD"),
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "torch": torch.__version__,
        "machine": machine,
        "commands": commands,
        "measures": "results",
        "fingerprints": record(cases),
    }
    kept = [old for old in read(folder) if not set(old["files"]) & set(files)] if (folder / FILE).is_file() else []
    (folder / FILE).write_text(json.dumps({"format": FORMAT, "records": [*kept, entry]}, indent=1) + "\n")
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument(
        "--cases", required=True, help="comma-separated fingerprint cases (tests/fingerprints.py CASES)"
    )
    parser.add_argument(
        "--command", action="append", required=True, help="a command that produced the results (repeat)"
    )
    parser.add_argument(
        "--machine", default=_machine(), help="the machine in words (default: architecture, cores, GPU)"
    )
    parser.add_argument("--files", help="comma-separated files the record covers (default: every file but the README)")
    parser.add_argument(
        "--commit", help="the commit of the code imported, when it is not this checkout (a copy of one commit)"
    )
    args = parser.parse_args()
    cases = args.cases.split(",")
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        sys.exit(f"unknown fingerprint cases {unknown}; known: {', '.join(CASES)}")
    files = args.files.split(",") if args.files else None
    print(json.dumps(write(args.folder, cases, args.command, args.machine, files, args.commit), indent=1))


if __name__ == "__main__":
    main()
