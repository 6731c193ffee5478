"""``ladd plugins``: loaded, failed and blocked plugins; ``ladd plugins check NAME`` validates one."""
from __future__ import annotations

import argparse
import sys
import warnings

from registry.errors import LaddError
from registry.host.commands import PluginCommands
from registry.host.component import Origin
from registry.host.registry import Registry

from .context import run_command
from .notices import clash_lines


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to the parser."""
    p = sub.add_parser(
        "plugins", help="list loaded, failed and blocked plugins; `ladd plugins check NAME` validates one"
    )
    p.add_argument("action", nargs="?", choices=["check"])
    p.add_argument("name", nargs="?")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, registry: Registry) -> None:
    """List the plugins, or check one."""
    if args.action == "check":
        check_plugin(args.name, registry, args.plugin_commands, args.command_line)
        return
    contributed: dict[Origin, list[str]] = {}
    for origin, what in (
        *((c.origin, "component") for c in registry),
        *((entry.origin, "importer") for entry in registry.importers.values()),
        *((hook.origin, "command hook") for hook in registry.command_hooks),
    ):
        contributed.setdefault(origin, []).append(what)
    for origin, things in sorted(contributed.items(), key=lambda item: item[0].plugin):
        counts = {what: things.count(what) for what in dict.fromkeys(things)}
        counted = ", ".join(f"{n} {what}{'s' * (n != 1)}" for what, n in counts.items())
        contract = "contract not declared" if origin.contract is None else f"contract {origin.contract}"
        print(f"{origin.plugin:<16} {origin.distribution or '-':<24} {origin.version or '-':<10} {counted}; {contract}")
    for failure in registry.failures:
        print(f"{failure.plugin:<16} {failure.distribution or '-':<24} {'-':<10} FAILED: {failure.error}")
    for blocked in registry.blocked:
        print(f"{blocked.plugin:<16} {blocked.distribution or '-':<24} {'-':<10} BLOCKED: {blocked.error}")
    for line in clash_lines(registry):
        print(f"CLASH: {line}")
    for note in registry.notes:
        print(f"ladd: note: {note}", file=sys.stderr)


def check_plugin(
    name: str | None, registry: Registry, added: PluginCommands, command_line: argparse.ArgumentParser
) -> None:
    """Import, config and tiny-use checks of every component and importer of plugin ``name``, and of the commands it
    added to the parser (``added``: their help rendered, and each run on its example arguments through
    ``command_line``); its problems are one error."""
    from registry.conformance.validation import NotExercised, command_problems  # torch: only when a check runs
    from registry.conformance.validation import check_plugin as problems_of

    if not name:
        raise LaddError("usage: ladd plugins check NAME (see `ladd plugins` for the names)")
    commands = added.added.get(name, {})
    examples = added.examples.get(name, {})

    def run(argv: list[str]) -> None:
        run_command(command_line.parse_args(argv), registry)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = problems_of(name, registry)
        for parser in commands.values():
            parser.format_help()
        problems += command_problems(name, examples, run, registry)
    skipped = [warning for warning in caught if issubclass(warning.category, NotExercised)]
    for warning in skipped:
        print(f"note: {warning.message}", file=sys.stderr)
    unrun = sorted(set(commands) - set(examples))
    for command in unrun:
        print(f"note: command {command!r}: not run: it declares no example arguments (add_command(..., example=))",
              file=sys.stderr)
    problems += [added.problems[name]] if name in added.problems else []
    if problems:
        raise LaddError(f"plugin {name!r} has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    count = sum(1 for c in registry if c.origin.plugin == name)
    importers = sum(1 for entry in registry.importers.values() if entry.origin.plugin == name)
    unused = sum(1 for warning in skipped if str(warning.message).startswith("importer "))
    needs = f", {len(skipped)} need downloads or text data this check lacks (notes above)" if skipped else ""
    parts = []
    if count or not (importers or commands):
        built = count - len(skipped) + unused
        parts.append(f"{count} components import and match their configs; {built} built and ran at a tiny size{needs}")
    if importers:
        parts.append(f"{importers - unused} of {importers} importer(s) imported their example checkpoint")
    if commands:
        ran = f" ({len(examples)} run on a run folder)" if examples else ""
        parts.append(f"adds the command(s) {', '.join(sorted(commands))}{ran}")
    print(f"plugin {name!r}: " + "; ".join(parts))
