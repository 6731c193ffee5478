"""The component registry and plugin host, exercised with in-process plugins."""
from __future__ import annotations

import dataclasses
import types

import pytest

from registry import ComponentSpec, Origin, Registry, hookimpl
from registry._component import Component
from registry._plugins import PluginHost
from registry.errors import ComponentClashError, InvalidConfigError, PluginLoadError, UnknownComponentError


@dataclasses.dataclass
class _Options:
    width: int = 3


def _make(config: _Options, **context):
    return ("built", config.width, context)


def _plugin(*specs: ComponentSpec) -> types.SimpleNamespace:
    @hookimpl
    def ladd_components():
        return list(specs)

    return types.SimpleNamespace(ladd_components=ladd_components)


def test_spec_rejects_unknown_kind_and_bad_factory():
    with pytest.raises(ValueError, match="valid kinds: process, latent"):
        ComponentSpec(kind="optimizer", name="adam", factory=_make)
    with pytest.raises(ValueError, match="module:attribute"):
        ComponentSpec(kind="schedule", name="s", factory="no_colon_here")
    with pytest.raises(TypeError, match="must be a dataclass"):
        ComponentSpec(kind="schedule", name="s", factory=_make, config=dict)


def test_host_records_origin_and_builds_with_config_and_context():
    host = PluginHost()
    host.register(_plugin(ComponentSpec("schedule", "s1", _make, _Options, "doc")), "mine", Origin("mine", "my-dist", "1.2"))
    registry = Registry.from_host(host)
    component = registry.get("schedule", "s1")
    assert component.as_dict() == {
        "kind": "schedule", "name": "s1", "plugin": "mine", "distribution": "my-dist", "version": "1.2", "description": "doc",
    }
    assert registry.build("schedule", "s1", {"width": 7}, extra=1) == ("built", 7, {"extra": 1})


def test_lazy_factory_is_imported_on_first_build_only():
    component = Component(ComponentSpec("metric", "m", "fractions:Fraction"), Origin("p"))
    assert component.factory()(3, 6) == component.factory()(1, 2)


def test_unknown_name_lists_valid_names_and_closest_match():
    registry = Registry([Component(ComponentSpec("backbone", n, _make), Origin("p")) for n in ("dit", "mmdit", "mlp")])
    with pytest.raises(UnknownComponentError) as info:
        registry.get("backbone", "mmdt")
    message = str(info.value)
    assert "did you mean 'mmdit'" in message and "valid backbone names: dit, mlp, mmdit" in message


def test_unknown_option_names_the_option_the_closest_match_and_every_valid_one():
    component = Component(ComponentSpec("schedule", "s1", _make, _Options), Origin("p"))
    with pytest.raises(InvalidConfigError) as info:
        component.build({"widht": 5})
    assert str(info.value) == "schedule 's1' has no option 'widht'; did you mean 'width'? valid options: width"


def test_options_from_python_are_type_checked_and_converted_as_in_a_config():
    component = Component(ComponentSpec("schedule", "s1", _make, _Options), Origin("p"))
    with pytest.raises(InvalidConfigError) as info:
        component.build({"width": "wide"})
    assert str(info.value).startswith("invalid option 'width' of schedule 's1': Value 'wide' of type 'str' could not be converted to Integer")
    assert component.build({"width": "7"}) == ("built", 7, {})


def test_name_clash_names_both_plugins():
    first = Component(ComponentSpec("schedule", "linear", _make), Origin("builtin", "ladd"))
    second = Component(ComponentSpec("schedule", "linear", _make), Origin("other", "other-dist"))
    with pytest.raises(ComponentClashError, match="'builtin'.*'other'"):
        Registry([first, second])


def test_failing_plugin_is_reported_and_others_still_load(monkeypatch):
    @hookimpl
    def broken():
        raise RuntimeError("boom")

    host = PluginHost()
    host.register(types.SimpleNamespace(ladd_components=broken), "broken")
    host.register(_plugin(ComponentSpec("schedule", "ok", _make)), "good")
    registry = Registry.from_host(host)
    assert registry.names("schedule") == ["ok"]
    assert [(f.plugin, f.error) for f in registry.failures] == [("broken", "RuntimeError: boom")]

    monkeypatch.setenv("LADD_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="'broken'.*boom"):
        Registry.from_host(host)


def test_loading_is_idempotent():
    import registry

    first = registry.load()
    assert registry.load() is first
    again = registry.load(reload=True)
    assert [c.as_dict() for c in again] == [c.as_dict() for c in first]
