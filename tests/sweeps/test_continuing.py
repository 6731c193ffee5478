"""Launching a sweep again continues it: finished jobs are skipped, jobs still running are left alone, failed ones are
tried again until they have failed more than ``--retries`` times and are then reported in one line each; a job's
failure never stops the others, and a job stopped by a signal stops the serial launcher."""
from __future__ import annotations

import os
import socket

import pytest

import registry
from registry.errors import LaddError
from registry.sweeps.choice import LauncherChoice
from registry.sweeps.folder import FAILED, FINISHED, RUNNING, STOPPED, JobRecord, Manifest, PlannedJob, SweepFolder
from registry.sweeps.launching import launch_sweep


class ScriptedJob:
    """A job that records itself as the sweep's job does and ends as ``script`` says: 0 finishes, 2 fails, 128 + N
    stops; ``calls`` counts its runs by index."""

    def __init__(self, folder: SweepFolder, index: int, script: dict[int, int], calls: dict[int, int]) -> None:
        self.folder, self.index, self.script, self.calls = folder, index, script, calls

    def __call__(self) -> int:
        self.calls[self.index] = self.calls.get(self.index, 0) + 1
        record = self.folder.record(self.index) or JobRecord(self.index)
        record.starts += 1
        status = self.script.get(self.index, 0)
        record.state = {0: FINISHED, 2: FAILED}.get(status, STOPPED)
        record.failures += status == 2
        record.exit_status, record.error = status, None if status == 0 else f"job {self.index} went wrong"
        self.folder.write_record(record)
        return status


@pytest.fixture
def sweep(tmp_path):
    folder = SweepFolder(tmp_path / "sweep")
    planned = Manifest([PlannedJob(i, [f"seed={i}"], [f"seed={i}"]) for i in range(3)])
    calls: dict[int, int] = {}
    script: dict[int, int] = {}
    reg = registry.load()
    launcher = LauncherChoice("serial").build(reg)

    def launch(retries: int = 2) -> None:
        launch_sweep(
            folder, planned, LauncherChoice("serial"), launcher, reg,
            lambda job: ScriptedJob(folder, job.index, script, calls), retries,
        )

    return folder, script, calls, launch


def test_a_failed_job_does_not_stop_the_others_and_is_tried_again_up_to_the_retries(sweep, capsys):
    folder, script, calls, launch = sweep
    script[1] = 2
    with pytest.raises(LaddError, match=r"1 job of 3 did not finish \(1 failed\)"):
        launch(retries=1)
    assert calls == {0: 1, 1: 1, 2: 1}
    manifest = folder.require()
    assert [(j.state, j.exit_status, j.tries) for j in manifest.jobs] == [
        ("finished", 0, 1), ("failed", 2, 1), ("finished", 0, 1)
    ]
    with pytest.raises(LaddError):
        launch(retries=1)
    assert calls == {0: 1, 1: 2, 2: 1}, "finished jobs are skipped, the failed one is tried again"
    capsys.readouterr()
    with pytest.raises(LaddError, match="did not finish"):
        launch(retries=1)
    assert calls == {0: 1, 1: 2, 2: 1}, "failed twice, more than --retries 1: not tried again"
    assert capsys.readouterr().err.splitlines() == [
        "job 1 (seed=1): failed 2 times, more than --retries 1, and is not tried again; its last error: job 1 went "
        "wrong"
    ]
    script[1] = 0
    launch(retries=2)  # a larger bound lets it run again, and the sweep ends finished
    assert calls == {0: 1, 1: 3, 2: 1}
    assert [j.state for j in folder.require().jobs] == ["finished"] * 3


def test_a_job_stopped_by_a_signal_stops_the_serial_launcher_and_resumes_next_time(sweep):
    folder, script, calls, launch = sweep
    script[1] = 143
    with pytest.raises(LaddError, match=r"2 jobs of 3 did not finish \(1 stopped, 1 not started\)"):
        launch()
    assert calls == {0: 1, 1: 1}
    del script[1]
    launch()
    assert calls == {0: 1, 1: 2, 2: 1}


def test_a_job_still_running_is_left_to_it(sweep, capsys):
    folder, script, calls, launch = sweep
    folder.path.mkdir()
    folder.write(Manifest([PlannedJob(i, [f"seed={i}"], [f"seed={i}"]) for i in range(3)]))
    # job 2 runs as this very process (as a job another ladd launched still runs)
    folder.write_record(JobRecord(2, RUNNING, 1, host=socket.gethostname(), pid=os.getpid()))
    with pytest.raises(LaddError, match=r"1 job of 3 did not finish \(1 running\)"):
        launch()
    assert calls == {0: 1, 1: 1}
    assert "1 job still queued or running from an earlier launch: left to it" in capsys.readouterr().out
