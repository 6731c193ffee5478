"""The component registry and plugin host, exercised with in-process plugins."""
from __future__ import annotations

import dataclasses
import types

import pytest
from support import fake_distribution

from registry import ComponentSpec, Origin, Registry, hookimpl
from registry.errors import (
    ComponentClashError,
    ComponentError,
    InvalidConfigError,
    PluginLoadError,
    UnknownComponentError,
)
from registry.host.component import Component
from registry.host.plugins import PluginFailure, PluginHost
from registry.interfaces import Schedule
from registry.toolkit.options import refers_to


@dataclasses.dataclass
class _Options:
    width: int = 3


class _Built(Schedule):
    """A schedule that remembers what it was built from."""

    def __init__(self, config: _Options, **context) -> None:
        self.built = (config.width, context)

    def signal(self, tau):
        return 1 - tau


def _make(config: _Options, **context) -> _Built:
    return _Built(config, **context)


def _plugin(*specs: ComponentSpec) -> types.SimpleNamespace:
    @hookimpl
    def ladd_components():
        return list(specs)

    return types.SimpleNamespace(ladd_components=ladd_components)


def test_spec_rejects_unknown_kind_naming_the_component_and_bad_factory():
    with pytest.raises(ValueError, match="component 'adam' has unknown kind 'optimizer' valid kinds: process, latent"):
        ComponentSpec(kind="optimizer", name="adam", factory=_make)
    with pytest.raises(ValueError, match="component 'warm' has unknown kind 'schedul'; did you mean 'schedule'"):
        ComponentSpec(kind="schedul", name="warm", factory=_make)
    with pytest.raises(ValueError, match="module:attribute"):
        ComponentSpec(kind="schedule", name="s", factory="no_colon_here")
    with pytest.raises(TypeError, match="must be a dataclass"):
        ComponentSpec(kind="schedule", name="s", factory=_make, config=dict)


def test_host_records_origin_from_the_distribution_and_builds_with_config_and_context(monkeypatch, tmp_path):
    path = fake_distribution(tmp_path, "mine", """
        import dataclasses
        from registry import ComponentSpec, hookimpl
        from registry.interfaces import Schedule

        @dataclasses.dataclass
        class Options:
            width: int = 3

        class make(Schedule):
            def __init__(self, config, **context):
                self.built = (config.width, context)

            def signal(self, tau):
                return 1 - tau

        @hookimpl
        def ladd_components():
            return [ComponentSpec("schedule", "s1", make, Options, "doc")]
    """, version="1.2")
    monkeypatch.syspath_prepend(path)
    monkeypatch.setenv("LADD_PLUGINS_ALLOW", "mine")
    host = PluginHost()
    host.load_entry_points()
    registry = Registry.from_host(host)
    component = registry.get("schedule", "s1")
    assert component.as_dict() == {
        "kind": "schedule",
        "name": "s1",
        "qualified": "mine:s1",
        "plugin": "mine",
        "distribution": "mine",
        "version": "1.2",
        "description": "doc",
    }
    assert registry.build("schedule", "s1", {"width": 7}, extra=1).built == (7, {"extra": 1})
    assert "builtin" in {c.origin.plugin for c in registry}


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
    assert str(info.value).startswith(
        "invalid option 'width' of schedule 's1': Value 'wide' of type 'str' could not be converted to Integer"
    )
    assert component.build({"width": "7"}).built == (7, {})


def test_name_clash_is_listed_and_is_an_error_only_where_the_name_is_used_ladds_own_name_included():
    first = Component(ComponentSpec("schedule", "linear", _make), Origin("builtin", "ladd", "0.1.0", own=True))
    second = Component(ComponentSpec("schedule", "linear", _make), Origin("other", "other-dist", "2.0"))
    bystander = Component(ComponentSpec("schedule", "cosine", _make), Origin("other", "other-dist", "2.0"))
    registry = Registry([first, second, bystander])
    assert registry.clashes() == [[first, second]]
    assert registry.names("schedule") == ["cosine", "linear"]
    assert registry.get("schedule", "cosine") is bystander
    with pytest.raises(ComponentClashError) as info:
        registry.get("schedule", "linear")
    assert str(info.value) == (
        "schedule 'linear' is registered by several plugins: 'builtin' (ladd 0.1.0), 'other' (other-dist 2.0); "
        "name the one you mean: builtin:linear or other:linear"
    )
    assert registry.get("schedule", "builtin:linear") is first and registry.get("schedule", "other:linear") is second
    assert registry.get("schedule", "linear", plugin="other") is second, "a run's record picks among several"


def test_a_qualified_name_selects_one_plugins_component_and_a_missing_plugin_is_one_line():
    mine = Component(ComponentSpec("schedule", "steep", _make), Origin("mine", "mine-dist", "1.0"))
    gone = PluginFailure("gone", "ImportError: no module", "gone-dist")
    registry = Registry([mine], failures=[gone])
    assert registry.get("schedule", "mine:steep") is mine
    with pytest.raises(UnknownComponentError) as info:
        registry.get("schedule", "mine:stee")
    assert str(info.value) == (
        "plugin 'mine' registers no schedule 'stee'; did you mean 'steep'? its schedule names: steep"
    )
    with pytest.raises(UnknownComponentError) as info:
        registry.get("schedule", "gone:steep")
    assert str(info.value) == (
        "schedule 'gone:steep' is not available: plugin 'gone' (gone-dist) failed to load: ImportError: no module; "
        "fix or uninstall it, or hide it with LADD_PLUGINS_BLOCK=gone"
    )
    with pytest.raises(UnknownComponentError) as info:
        registry.get("schedule", "mien:steep")
    assert str(info.value) == (
        "schedule 'mien:steep' names plugin 'mien', which is not installed; did you mean 'mine'? loaded plugins: mine"
    )


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
    assert not host.manager.has_plugin("broken"), "a failed plugin is unregistered whole"

    monkeypatch.setenv("LADD_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="'broken'.*boom"):
        PluginHost().register(types.SimpleNamespace(ladd_components=broken), "broken")


def _failure_of(plugin: object) -> str:
    host = PluginHost()
    host.register(plugin, "faulty")
    assert not host.components and not host.config_dirs and not host.manager.has_plugin("faulty")
    [failure] = host.failures
    return failure.error


def test_hook_function_without_hookimpl_is_reported_naming_the_decorator():
    def ladd_components():
        return [ComponentSpec("schedule", "s", _make)]

    error = _failure_of(types.SimpleNamespace(ladd_components=ladd_components))
    assert error == (
        "it defines ladd_components() without the @hookimpl decorator, so ladd would ignore it: "
        "decorate it with @registry.hookimpl"
    )


def test_misspelt_hook_is_caught_by_pluggys_check_pending():
    @hookimpl
    def ladd_component():
        return []

    error = _failure_of(types.SimpleNamespace(ladd_component=ladd_component))
    assert error == (
        "@hookimpl function 'ladd_component' is not a ladd hook; did you mean 'ladd_components', 'ladd_commands', "
        "'ladd_importers'? ladd's hooks are ladd_commands, ladd_components, ladd_config_dirs, ladd_importers, "
        "ladd_model_folders"
    )


def test_failing_config_dirs_hook_is_isolated_like_components(tmp_path):
    @hookimpl
    def ladd_config_dirs():
        raise OSError("presets missing")

    plugin = _plugin(ComponentSpec("schedule", "s", _make))
    plugin.ladd_config_dirs = ladd_config_dirs
    assert _failure_of(plugin) == "OSError: presets missing"
    plugin.ladd_config_dirs = hookimpl(lambda: [tmp_path / "absent"])
    assert _failure_of(plugin) == f"ladd_config_dirs() returned {tmp_path / 'absent'!r}, which is not a folder"
    plugin.ladd_config_dirs = hookimpl(lambda: None)
    assert _failure_of(plugin) == "ladd_config_dirs() returned None; it must return a list"


def test_factory_that_fails_to_import_or_build_names_component_plugin_and_exception():
    origin = Origin("fancy", "fancy-ladd", "2.0")
    missing = Component(ComponentSpec("backbone", "ghost", "no_such_module_here:Ghost"), origin)
    with pytest.raises(ComponentError) as info:
        missing.build()
    assert str(info.value) == (
        "backbone 'ghost' of plugin 'fancy' (fancy-ladd 2.0) factory 'no_such_module_here:Ghost' does not import: "
        "ModuleNotFoundError: No module named 'no_such_module_here'; fix or update plugin 'fancy', or choose another "
        "backbone (`ladd list-components --kind backbone`)"
    )

    def explode(config):
        raise RuntimeError("out of coffee")

    failing = Component(ComponentSpec("schedule", "brew", explode, _Options), origin)
    with pytest.raises(
        ComponentError, match="^schedule 'brew' of plugin 'fancy' .* failed to build: RuntimeError: out of coffee;"
    ) as info:
        failing.build()
    assert isinstance(info.value.__cause__, RuntimeError)


def test_loading_is_idempotent():
    import registry

    first = registry.load()
    assert registry.load() is first
    again = registry.load(reload=True)
    assert [c.as_dict() for c in again] == [c.as_dict() for c in first]


@dataclasses.dataclass
class _Base:
    # the number of widgets,
    # counted twice
    count: int = 2
    ratio: float = 0.5  # share of the widgets that spin


@dataclasses.dataclass
class _Derived(_Base):
    label: str | None = None
    mode: str = dataclasses.field(default="fast", metadata={"help": "fast or careful"})  # the comment loses to metadata
    sizes: list[int] = dataclasses.field(default_factory=lambda: [1, 2])
    on: bool = True


def test_option_help_reads_types_defaults_metadata_and_comments_through_bases():
    from registry.host.options import OptionHelp, option_help

    assert option_help(_Derived) == [
        OptionHelp("count", "int", "2", "the number of widgets, counted twice"),
        OptionHelp("ratio", "float", "0.5", "share of the widgets that spin"),
        OptionHelp("label", "str | None", "null", ""),
        OptionHelp("mode", "str", "fast", "fast or careful"),
        OptionHelp("sizes", "list[int]", "[1, 2]", ""),
        OptionHelp("on", "bool", "true", ""),
    ]
    assert option_help(None) == []


def test_build_from_python_as_documented():
    import torch

    import registry

    schedule = registry.build("schedule", "polynomial", {"power": 3})
    assert schedule.signal(torch.tensor([0.5])).item() == 0.875


@dataclasses.dataclass
class _Pair:
    """A component of any kind naming another of its kind (an objective its reward, a launcher its settings)."""

    steep: bool = False
    inner: str = dataclasses.field(
        default="base", metadata=refers_to("metric", options="inner_options", inherits=("steep",))
    )
    inner_options: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Steep:
    steep: bool = False
    width: int = 3


class _Named:
    """What a factory receives: its config, the context and the component its option names."""

    primary, lower_is_better = "score", True

    def __init__(self, config, inner=None, **context) -> None:
        self.config, self.inner, self.context = config, inner, context

    def __call__(self, samples, reference):
        return {"score": 0.0}


def test_an_option_naming_a_component_of_any_kind_is_resolved_checked_built_passed_and_recorded():
    origin, other = Origin("mine", "mine-dist", "1.0"), Origin("other", "other-dist", "2.0")
    pair = Component(ComponentSpec("metric", "pair", _Named, _Pair), origin)
    base = Component(ComponentSpec("metric", "base", _Named, _Steep), origin)
    twin = Component(ComponentSpec("metric", "base", _Named, _Steep), other)
    alone = Registry([pair, base])
    built, resolved = alone.instantiate(pair, {"steep": True, "inner_options": {"width": "5"}}, tokenizer="tok")
    assert (built.config.inner, built.inner.config.width, built.inner.config.steep) == ("mine:base", 5, True)
    assert built.inner.context == {"tokenizer": "tok"}, "the named component gets its own kind's context"
    assert resolved.record()["nested"]["inner"]["qualified"] == "mine:base"
    with pytest.raises(InvalidConfigError, match=r"^inner_options: metric 'base' has no option 'depth'"):
        alone.check_options(pair, {"inner_options": {"depth": 1}})
    with pytest.raises(ComponentError, match="names other components in inner: build it with registry.build"):
        pair.build({})
    both = Registry([pair, base, twin])
    with pytest.raises(ComponentClashError, match="name the one you mean: mine:base or other:base"):
        both.instantiate(pair)
    recorded = {"nested": {"inner": {"kind": "metric", "name": "base", "plugin": "other"}}}
    assert both.instantiate(pair, {}, recorded)[0].inner.config.width == 3
    assert both.instantiate(pair, {"inner": "other:base"})[1].nested["inner"].component is twin
