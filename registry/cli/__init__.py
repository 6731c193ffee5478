"""The ``ladd`` command line: one module per command, each adding its arguments and its handler to the parser.

Building the parser imports no torch (``ladd list-components`` and ``ladd plugins`` stay fast); a handler
imports the machinery it drives when it runs.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from contextlib import nullcontext

from registry.errors import LaddError, describe_failure
from registry.host.commands import add_plugin_commands
from registry.host.plugin_code import PluginCode, unasked_interrupt
from registry.host.plugins import STRICT_ENV
from registry.host.registry import Registry, load
from registry.host.switches import debugging, switch
from registry.training.stopping import Stopped, stopping_on_signals

from . import (
    compare,
    components,
    encode,
    evaluate,
    export,
    flops,
    frontier,
    harness,
    importer,
    plugins,
    prepare,
    report,
    reward,
    sample,
    sweep,
    train,
    zero_shot,
)
from .arguments import Parser
from .context import run_command

DEBUG_ENV = "LADD_DEBUG"
#: the commands in the order `ladd --help` lists them
COMMANDS = (
    components, plugins, prepare, train, sweep, sample, encode, export, importer, evaluate, reward, zero_shot, harness,
    report, compare, flops, frontier,
)


def parser(registry: Registry | None = None) -> argparse.ArgumentParser:
    """The parser of every command: ladd's own, then those the plugins of ``registry`` add (``ladd_commands``); a
    plugin whose commands are left out gets a warning line. What the plugins added is ``args.plugin_commands``."""
    top = Parser(prog="ladd", description="Masked and latent-augmented discrete diffusion, built from plugins.")
    sub = top.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    added = add_plugin_commands(sub, [] if registry is None else registry.command_hooks, strict=switch(STRICT_ENV))
    for problem in added.problems.values():
        print(f"ladd: warning: {problem}", file=sys.stderr)
    top.set_defaults(plugin_commands=added, command_line=top)
    return top


def _show_error(error: BaseException, message: str | None = None) -> None:
    debug = debugging(DEBUG_ENV)
    if debug:
        traceback.print_exception(error)
    hint = f" ({DEBUG_ENV}=1 shows the traceback)" if error.__cause__ is not None and not debug else ""
    print(f"ladd: error: {message or error}{hint}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ladd`` command."""
    argv = sys.argv[1:] if argv is None else argv
    # training stops on a signal with a ladd line from its first moment, also while it loads plugins and libraries
    stops = stopping_on_signals() if argv[:1] == [train.NAME] else nullcontext()
    watch = PluginCode(own_output=True)  # tells the user's Ctrl-C from a KeyboardInterrupt that code raises itself
    try:
        with watch, stops:
            registry = load()
            args = parser(registry).parse_args(argv)
            run_command(args, registry)
        return 0
    except KeyboardInterrupt as error:
        if not watch.is_fault(error):
            raise  # the user's Ctrl-C ends ladd as Python ends a program
        _show_error(error, unasked_interrupt(error))
        return 2
    except Stopped as stop:
        if not stop.quiet:
            print(f"ladd: {stop}", file=sys.stderr)
        return stop.exit_status
    except LaddError as error:
        _show_error(error)
        return 2
    except (OSError, MemoryError, RuntimeError) as error:  # a full disk, a vanished file; torch's failed allocation
        message = describe_failure(error)
        if message is None:
            raise
        _show_error(error, message)
        return 2
