"""Every committed results folder says how it was produced, and fails here once the code that produced it changes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from fingerprints import digest, recorded
from provenance import FILE, FORMAT, README, problems, result_folders
from support import ROOT

CASE = "binsaw/mdlm_cpu"


@pytest.mark.parametrize("folder", result_folders(ROOT), ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_results_match_the_current_code_or_say_they_are_stale(folder):
    assert problems(folder) == []


def test_every_results_folder_is_checked():
    checked = {str(p.relative_to(ROOT)) for p in result_folders(ROOT)}
    assert {"results/binsaw", "results/demo", "results/ablations/quantizer", "bench/results/cpu"} <= checked


def _folder(tmp_path: Path, readme: str = "# results\n", **fields) -> Path:
    fixture = recorded()
    (tmp_path / "table.csv").write_text("method,lx\n")
    (tmp_path / README).write_text(readme)
    entry = {
        "files": ["table.csv"],
        "commit": "0123abc",
        "date": "2026-11-26",
        "torch": "2.13.0",
        "machine": "cpu",
        "commands": ["ladd compare"],
        "measures": "results",
        "fingerprints": {CASE: digest(fixture[CASE])},
        **fields,
    }
    (tmp_path / FILE).write_text(json.dumps({"format": FORMAT, "records": [entry]}))
    return tmp_path


def _changed_code() -> dict:
    """The fixture as it would read after a change of what ``binsaw/mdlm_cpu`` computes."""
    fixture = copy.deepcopy(recorded())
    fixture[CASE]["logged_losses"][0] = "0.5"
    return fixture


def test_a_record_of_the_current_code_passes(tmp_path):
    assert problems(_folder(tmp_path)) == []


def test_a_change_of_behaviour_fails_until_the_results_are_rerun_or_called_stale(tmp_path):
    folder = _folder(tmp_path)
    assert problems(folder, _changed_code()) == [
        f"{folder / FILE} record 0: the code of {CASE!r} changed since these results were produced (0123abc): "
        f"produce them again, or add a stale note for it to the record and to {README}"
    ]


def test_a_stale_note_passes_only_when_the_readme_carries_it(tmp_path):
    note = "Stale: produced before the EMA's update changed its rounding."
    folder = _folder(tmp_path, stale={CASE: note})
    fixture = _changed_code()
    assert problems(folder, fixture) == [
        f"{folder / FILE} record 0: the stale note for {CASE!r} is missing from {README}: {note}"
    ]
    (folder / README).write_text(f"# results\n\n{note}\n")
    assert problems(folder, fixture) == []


def test_a_stale_note_on_results_the_code_reproduces_is_refused(tmp_path):
    note = "Stale: old."
    folder = _folder(tmp_path, readme=note, stale={CASE: note})
    assert problems(folder) == [
        f"{folder / FILE} record 0: {CASE!r} is reproduced by the current code, but the record calls it stale"
    ]


def test_results_without_a_fingerprint_or_of_a_case_nobody_fingerprints_are_refused(tmp_path):
    assert problems(_folder(tmp_path / "a", fingerprints={})) == [
        f"{tmp_path / 'a' / FILE} record 0: "
        "results name the fingerprint cases of the code that produced them (fingerprints)"
    ]
    assert problems(_folder(tmp_path / "b", fingerprints={"binsaw/new": "00"})) == [
        f"{tmp_path / 'b' / FILE} record 0: "
        "'binsaw/new' has no fingerprint: add it to tests/fingerprints.py's CASES and record it"
    ]


def test_a_file_no_record_covers_and_a_missing_record_are_refused(tmp_path):
    folder = _folder(tmp_path)
    (folder / "swd.png").write_bytes(b"")
    assert problems(folder) == [f"{folder}: swd.png is covered by no record"]
    (folder / FILE).unlink()
    assert problems(folder) == [f"{folder} has no {FILE}"]


@pytest.fixture(autouse=True)
def _mkdirs(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
