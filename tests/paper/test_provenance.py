"""Every committed results folder says how it was produced, and fails here once the code that produced it behaves
differently: each record's fingerprint cases are run again with the current code and compared."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
from fingerprints import FAST, computed, fingerprint, recorded
from provenance import FILE, FORMAT, README, cases, problems, result_folders
from support import ROOT

import registry.toolkit.decoding as decoding

CASE = "binsaw/mdlm_cpu"
#: a fingerprint as a record stores it (the checks below are given the current code's instead of running a case)
FOUND = {"logged_losses": [0.75, 0.5], "samples": {"tokens": [[0, 1], [1, 1]], "network_calls": 2}}


def _marked(folder: Path):
    """The folder as a test parameter: in the slow tier when one of its cases is (it is run again)."""
    slow = [pytest.mark.slow] if cases(folder) - set(FAST) else []
    return pytest.param(folder, marks=slow, id=str(folder.relative_to(ROOT)))


@pytest.mark.parametrize("folder", [_marked(folder) for folder in result_folders(ROOT)])
def test_committed_results_are_reproduced_by_the_current_code_or_say_they_are_stale(folder):
    assert problems(folder) == []


def test_every_committed_results_folder_is_checked():
    checked = {str(p.relative_to(ROOT)) for p in result_folders(ROOT)}
    assert {"results/binsaw", "results/demo", "results/ablations/quantizer", "bench/results/cpu"} <= checked


def test_what_a_command_writes_under_results_is_not_a_committed_result(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for folder in ("results/binsaw", "results/quickstart", "bench/results/cpu"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "table.csv").write_text("method,lx\n")
    git("add", "results/binsaw", "bench/results/cpu")
    # the quickstart's folder (results/quickstart, ignored by git) holds no provenance and is not checked
    assert result_folders(tmp_path) == [tmp_path / "bench/results/cpu", tmp_path / "results/binsaw"]


def _folder(tmp_path: Path, readme: str = "# results\n", **fields) -> Path:
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
        "fingerprints": {CASE: FOUND},
        **fields,
    }
    (tmp_path / FILE).write_text(json.dumps({"format": FORMAT, "records": [entry]}))
    return tmp_path


def _same(case: str) -> dict:
    return FOUND


def _changed(case: str) -> dict:
    """What the current code computes after a change of behaviour: one sampled token differs."""
    changed = copy.deepcopy(FOUND)
    changed["samples"]["tokens"][1][0] = 0
    return changed


def test_a_record_of_the_current_code_passes(tmp_path):
    assert problems(_folder(tmp_path), _same) == []


def test_floats_within_the_measured_tolerance_pass_and_beyond_it_fail(tmp_path):
    folder = _folder(tmp_path)
    rounded = copy.deepcopy(FOUND)
    rounded["logged_losses"][0] *= 1 + 1e-6  # another CPU's kernels
    assert problems(folder, lambda case: rounded) == []
    moved = copy.deepcopy(FOUND)
    moved["logged_losses"][0] *= 1 + 1e-3  # another loss
    assert problems(folder, lambda case: moved) == [
        f"{folder / FILE} record 0: the code of {CASE!r} changed since these results were produced (0123abc): "
        f"1 numbers differ (/logged_losses[0]: {moved['logged_losses'][0]!r} instead of 0.75): produce them again, "
        f"or add a stale note for it to the record and to {README}"
    ]


def test_a_change_of_behaviour_fails_until_the_results_are_rerun_or_called_stale(tmp_path):
    folder = _folder(tmp_path)
    assert problems(folder, _changed) == [
        f"{folder / FILE} record 0: the code of {CASE!r} changed since these results were produced (0123abc): "
        f"1 numbers differ (/samples/tokens[1][0]: 0 instead of 1): produce them again, or add a stale note for it "
        f"to the record and to {README}"
    ]


def test_the_check_fails_on_a_changed_sampler_and_passes_on_the_code_as_it_is(tmp_path, monkeypatch):
    """The recorded fingerprint of the preset, run again as the code is, then with Dream's margin order scoring like
    LLaDA's confidence."""
    folder = _folder(tmp_path / "results", fingerprints={CASE: recorded()[CASE]})
    assert problems(folder, computed) == []
    monkeypatch.setitem(decoding._SCORES, "margin", decoding._low_confidence)
    found = problems(folder, lambda case: fingerprint(case, tmp_path / "run"))
    assert len(found) == 1 and "/decoders/margin_blocks/tokens" in found[0], found


def test_a_stale_note_passes_only_when_the_readme_carries_it(tmp_path):
    note = "Stale: produced before the EMA's update changed its rounding."
    folder = _folder(tmp_path, stale={CASE: note})
    assert problems(folder, _changed) == [
        f"{folder / FILE} record 0: the stale note for {CASE!r} is missing from {README}: {note}"
    ]
    (folder / README).write_text(f"# results\n\n{note}\n")
    assert problems(folder, _changed) == []


def test_a_stale_note_on_results_the_code_reproduces_is_refused(tmp_path):
    note = "Stale: old."
    folder = _folder(tmp_path, readme=note, stale={CASE: note})
    assert problems(folder, _same) == [
        f"{folder / FILE} record 0: {CASE!r} is reproduced by the current code, but the record calls it stale"
    ]


def test_a_fingerprint_of_a_retired_format_is_kept_by_stale_results_only(tmp_path):
    note = "Stale: made before fingerprints were compared with a tolerance."
    assert problems(_folder(tmp_path / "a", readme=note, fingerprints={CASE: None}, stale={CASE: note}), _same) == []
    assert problems(_folder(tmp_path / "b", fingerprints={CASE: None}), _same) == [
        f"{tmp_path / 'b' / FILE} record 0: {CASE!r} has no fingerprint: record the one of the code that produced them"
    ]


def test_results_without_a_fingerprint_or_of_a_case_nobody_fingerprints_are_refused(tmp_path):
    assert problems(_folder(tmp_path / "a", fingerprints={}), _same) == [
        f"{tmp_path / 'a' / FILE} record 0: "
        "results name the fingerprint cases of the code that produced them (fingerprints)"
    ]
    assert problems(_folder(tmp_path / "b", fingerprints={"binsaw/new": FOUND}), _same) == [
        f"{tmp_path / 'b' / FILE} record 0: "
        "'binsaw/new' is no fingerprint case: add it to tests/fingerprints.py's CASES"
    ]


def test_a_file_no_record_covers_and_a_missing_record_are_refused(tmp_path):
    folder = _folder(tmp_path)
    (folder / "swd.png").write_bytes(b"")
    assert problems(folder, _same) == [f"{folder}: swd.png is covered by no record"]
    (folder / FILE).unlink()
    assert problems(folder, _same) == [f"{folder} has no {FILE}"]


@pytest.fixture(autouse=True)
def _mkdirs(tmp_path):
    for name in ("a", "b", "results"):
        (tmp_path / name).mkdir()
