"""Commands plugins add to ``ladd`` through the ``ladd_commands(commands)`` hook (simonw/llm's ``register_commands``
for argparse): each plugin's hook runs on its own, and one that fails, or names a command that is taken, adds nothing
and is reported in one line while the rest of ladd keeps working."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.contract import deprecated
from registry.errors import LaddError, PluginLoadError

from .component import Origin
from .plugin_code import FAULTS, PluginCode, describe

#: where a plugin command's handler is kept in the parsed arguments: a name no argument of its takes by accident
HANDLER = "ladd:handler"
#: the handler of a command added the earlier way (``parser.set_defaults(run=function)``), and of ladd's own
EARLIER_HANDLER = "run"
#: what stands for a folder in a command's ``example`` arguments: a tiny finished run, a model folder exported from it
EXAMPLE_FOLDERS = ("{run}", "{model}")


@dataclass(frozen=True)
class CommandHook:
    """A plugin's ``ladd_commands`` implementation, with the plugin's origin."""

    origin: Origin
    function: Callable[..., Any]


class Commands:
    """What a plugin's ``ladd_commands(commands)`` receives: ``commands.add_command(NAME, function, help=...)`` gives
    an argparse parser for ``ladd NAME``, to which the plugin adds its arguments; ladd calls ``function(args, ladd)``,
    ``ladd`` holding the registry and a loader of run and model folders. ``add_parser`` with
    ``parser.set_defaults(run=function)`` is the earlier way, deprecated."""

    def __init__(self, subparsers: argparse._SubParsersAction, taken: dict[str, str], plugin: str = "") -> None:
        self._subparsers, self._taken, self._plugin = subparsers, taken, plugin
        self.added: list[str] = []  # names and aliases
        self.parsers: dict[str, argparse.ArgumentParser] = {}
        self.handlers: dict[str, Callable[..., Any]] = {}  # commands added with add_command
        self.examples: dict[str, tuple[str, ...]] = {}  # their arguments for `ladd plugins check`

    def add_command(
        self, name: str, function: Callable[..., Any], *, example: Sequence[str] | None = None, **options: Any
    ) -> argparse.ArgumentParser:
        """A parser for the command ``ladd NAME`` (``options`` as argparse's ``add_parser`` takes them), which ladd runs
        as ``function(args, ladd)``.

        ``example``: the command's arguments for a run of ``ladd plugins check``, ``{run}`` standing for a tiny
        finished run folder and ``{model}`` for a model folder exported from it (None: the command is not run there).
        """
        if not callable(function):
            raise PluginLoadError(f"add_command({name!r}, ...) was given {function!r}, not a function(args, ladd)")
        if example is not None and (isinstance(example, str) or not all(isinstance(a, str) for a in example)):
            raise PluginLoadError(f"add_command({name!r}, ...): example must be a list of arguments, got {example!r}")
        parser = self._add(name, options)
        self.handlers[name] = function
        if example is not None:
            self.examples[name] = tuple(example)
        return parser

    def add_parser(self, name: str, **options: Any) -> argparse.ArgumentParser:
        """A parser for the command ``ladd NAME``, whose handler ``parser.set_defaults(run=function)`` sets: the earlier
        way, which works with a deprecation line until the contract that refuses it."""
        who = f"plugin {self._plugin!r}"
        try:
            deprecated("command_parser", who)
        except LaddError as error:  # reported as the plugin's: "plugin 'p': ladd_commands() adds its command ..."
            raise PluginLoadError(str(error).removeprefix(f"{who} ")) from None
        return self._add(name, options)

    def _add(self, name: str, options: dict[str, Any]) -> argparse.ArgumentParser:
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
    examples: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)  # plugin -> command -> arguments


def add_plugin_commands(
    subparsers: argparse._SubParsersAction, hooks: Iterable[CommandHook], strict: bool = False
) -> PluginCommands:
    """Run each plugin's hook against ``subparsers``, one plugin at a time; a plugin whose hook fails adds nothing
    (with ``strict``, its line is raised instead)."""
    taken = {name: "is one of ladd's own commands" for name in subparsers.choices}
    report = PluginCommands()
    for hook in hooks:
        plugin = hook.origin.plugin
        commands = Commands(subparsers, taken, plugin)
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
        report.examples.setdefault(plugin, {}).update(commands.examples)
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
        label = f"command {name!r} of plugin {hook.origin.plugin!r}"
        if name in commands.handlers:
            parser.set_defaults(**{HANDLER: _guarded(commands.handlers[name], label)})
            continue
        taking = [action for action in parser._actions if action.dest == EARLIER_HANDLER]
        if taking:
            argument = (taking[0].option_strings or [EARLIER_HANDLER])[-1]
            raise PluginLoadError(
                f"command {name!r} has an argument {argument!r} whose value would take the place of its handler "
                f"(set_defaults(run=...)): add the command with commands.add_command(NAME, function), whose arguments "
                f"may have any name"
            )
        run = parser.get_default(EARLIER_HANDLER)
        if not callable(run):
            raise PluginLoadError(
                f"added command {name!r} without a handler: add it with commands.add_command(NAME, function), where "
                f"function(args, ladd) runs it"
            )
        parser.set_defaults(**{HANDLER: _guarded(run, label, earlier=True)})


def _guarded(run: Callable[..., Any], label: str, earlier: bool = False) -> Callable[..., Any]:
    """``run`` whose failures (other than ladd's own one-line errors) are one line naming the command and its plugin,
    a KeyboardInterrupt it raises itself among them; called as ``guarded(args, ladd)``, it gives a handler added the
    earlier way (``earlier``) ``ladd.registry``.

    Its output stays on stdout, and an exit it asks for (``sys.exit``) or the user's Ctrl-C ends ladd as usual."""

    def guarded(args: argparse.Namespace, ladd: Any) -> Any:
        with PluginCode(own_output=True) as code:
            try:
                return run(args, ladd.registry if earlier else ladd)
            except (LaddError, OSError, MemoryError, SystemExit):  # reported by ladd as its own are
                raise
            except (Exception, KeyboardInterrupt) as error:
                if not code.is_fault(error):
                    raise
                raise LaddError(f"{label} failed: {describe(error)}") from error

    return guarded
