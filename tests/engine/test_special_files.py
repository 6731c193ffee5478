"""Files a command reads that are no regular file (a link to /dev/zero, a named pipe): each reader says so in one
line at once, where it would otherwise read forever or misname the file."""
from __future__ import annotations

import os

import pytest

from registry.engine.latents import load_latents
from registry.engine.references import read_references
from registry.errors import LaddError
from registry.storage.records import check_yaml, read_json
from registry.toolkit.checkpoints import POSITIVE, read_config


@pytest.fixture(params=["zero", "fifo"])
def special(request, tmp_path):
    """A path that is a link to /dev/zero, or a named pipe (which would block a reader's open)."""
    path = tmp_path / "file.json"
    if request.param == "zero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path)
    return path


@pytest.mark.parametrize("read", [
    lambda path: read_json(path, "a run record", "restore it"),
    lambda path: check_yaml(path, "a ladd config", "restore it"),
    lambda path: read_config(path, "a checkpoint's config", {"d_model": POSITIVE}, "give a checkpoint"),
])
def test_a_record_that_is_a_device_or_pipe_is_refused_without_reading_it(read, special):
    with pytest.raises(LaddError) as refused:
        read(special)
    assert str(refused.value).startswith(f"{special} is not a regular file (a device, pipe or folder), so it is not ")


def test_references_and_latents_that_are_a_device_or_pipe_are_named_so(special):
    with pytest.raises(LaddError, match=r"^reference file .* is not a regular file \(a device, pipe or folder\)"):
        read_references(special, None)
    with pytest.raises(LaddError, match=r"^latent file .* is not a regular file \(a device, pipe or folder\)"):
        load_latents(special, None)
