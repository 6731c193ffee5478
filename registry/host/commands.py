"""Commands plugins add to ``ladd`` through the ``ladd_commands(commands)`` hook (simonw/llm's ``register_commands``
for argparse): each plugin's hook runs on its own, and one that fails, or names a command that is taken, adds nothing
and is reported in one line while the rest of ladd keeps working."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from registry.errors import LaddError, PluginLoadError

from .component import Origin
from .plugin_code import FAULTS, PluginCode, describe


@dataclass(frozen=True)
class CommandHook:
    """A plugin's ``ladd_commands`` implementation, with the plugin's origin."""

    origin: Origin
    function: Callable[..., Any]


class Commands:
    """What a plugin's ``ladd_commands(commands)`` receives: ``commands.add_parser(NAME, help=...)`` gives an argparse
    parser for ``ladd NAME``, whose handler the plugin sets with ``parser.set_defaults(run=function)``; ladd calls
    ``function(args, registry)``."""

    def __init__(self, subparsers: argparse._SubParsersAction, taken: dict[str, str]) -> None:
        self._subparsers, self._taken = subparsers, taken
        self.added: list[str] = []  # names and aliases
        self.parsers: dict[str, argparse.ArgumentParser] = {}

    def add_parser(self, name: str, **options: Any) -> argparse.ArgumentParser:
        """A parser for the command ``ladd NAME`` (``options`` as argparse's ``add_parser`` takes them)."""
        for each in (name, *options.get("aliases", ())):
            if each in self._taken:
                raise PluginLoadError(f"command {each!r} {self._taken[each]}; rename it")
        parser = self._subparsers.add_parser(name, **options)
        self.added += [name, *options.get("aliases", ())]
        self.parsers[name] = parser
        return parser

    def _undo(self) -> None:
        """Take back the commands added (argparse has no public way to remove a subcommand)."""
        for name in self.added:
            self._subparsers.choices.pop(name, None)
        actions = self._subparsers._choices_actions
        actions[:] = [action for action in actions if action.dest not in self.parsers]
        self.added.clear()
        self.parsers.clear()


@dataclass
class PluginCommands:
    """What the plugins' hooks added: each plugin's commands (name -> parser), and why a plugin's were left out."""

    added: dict[str, dict[str, argparse.ArgumentParser]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # plugin -> one line


def add_plugin_commands(
    subparsers: argparse._SubParsersAction, hooks: Iterable[CommandHook], strict: bool = False
) -> PluginCommands:
    """Run each plugin's hook against ``subparsers``, one plugin at a time; a plugin whose hook fails adds nothing
    (with ``strict``, its line is raised instead)."""
    taken = {name: "is one of ladd's own commands" for name in subparsers.choices}
    report = PluginCommands()
    for hook in hooks:
        plugin = hook.origin.plugin
        commands = Commands(subparsers, taken)
        try:
            _run_hook(hook, commands)
        except PluginLoadError as error:
            commands._undo()
            line = f"plugin {plugin!r}: ladd_commands() {error}; its commands are left out"
            if strict:
                raise PluginLoadError(line) from error
            report.problems[plugin] = line
            continue
        taken.update(dict.fromkeys(commands.added, f"is provided by plugin {plugin!r}"))
        report.added.setdefault(plugin, {}).update(commands.parsers)
    return report


def _run_hook(hook: CommandHook, commands: Commands) -> None:
    """The hook, then a check that every command it added has a handler, which is then guarded."""
    with PluginCode() as code:
        try:
            hook.function(commands=commands)
        except PluginLoadError:
            raise
        except FAULTS as error:
            if not code.is_fault(error):
                raise
            raise PluginLoadError(f"raised {describe(error)}") from error
    for name, parser in commands.parsers.items():
        run = parser.get_default("run")
        if not callable(run):
            raise PluginLoadError(
                f"added command {name!r} without a handler: call parser.set_defaults(run=function), where "
                f"function(args, registry) runs it"
            )
        parser.set_defaults(run=_guarded(run, f"command {name!r} of plugin {hook.origin.plugin!r}"))


def _guarded(run: Callable[..., Any], label: str) -> Callable[..., Any]:
    """``run`` whose failures (other than ladd's own one-line errors) are one line naming the command and its plugin,
    a KeyboardInterrupt it raises itself among them.

    Its output stays on stdout, and an exit it asks for (``sys.exit``) or the user's Ctrl-C ends ladd as usual."""

    def guarded(args: argparse.Namespace, registry: Any) -> Any:
        with PluginCode(own_output=True) as code:
            try:
                return run(args, registry)
            except (LaddError, OSError, MemoryError, SystemExit):  # reported by ladd as its own are
                raise
            except (Exception, KeyboardInterrupt) as error:
                if not code.is_fault(error):
                    raise
                raise LaddError(f"{label} failed: {describe(error)}") from error

    return guarded
