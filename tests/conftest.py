"""Fixtures every test may use: the user's cache folder for the session, and running the ``ladd`` command."""
from __future__ import annotations

import os

import pytest
from support import run_ladd

# Tests never download: offline, a missing default model fails at once instead of retrying the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def _user_cache(tmp_path_factory):
    """The user's cache folder, where runs read back (eval, sample, export) keep their token caches: one per session."""
    if "LADD_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["LADD_CACHE_DIR"] = str(tmp_path_factory.mktemp("ladd_cache"))
    yield
    del os.environ["LADD_CACHE_DIR"]


@pytest.fixture
def ladd():
    return run_ladd
