"""The ``ladd`` command line: one module per command, each adding its arguments and its handler to the parser.

Building the parser imports no torch (``ladd list-components`` and ``ladd plugins`` stay fast); a handler
imports the machinery it drives when it runs.
"""
from __future__ import annotations

import argparse
import errno
import re
import sys
import traceback
from contextlib import nullcontext

from registry.errors import LaddError
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
    train,
    zero_shot,
)
from .arguments import Parser
from .context import run_command

DEBUG_ENV = "LADD_DEBUG"
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
#: the commands in the order `ladd --help` lists them
COMMANDS = (
    components, plugins, prepare, train, sample, encode, export, importer, evaluate, reward, zero_shot, harness,
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
    except OSError as error:  # a full disk, a read-only folder, a file that vanished
        _show_error(error, _describe_os_error(error))
        return 2
    except (MemoryError, RuntimeError) as error:  # torch reports a failed allocation as a RuntimeError
        if not _out_of_memory(error):
            raise
        _show_error(error, _describe_out_of_memory(error))
        return 2


def _out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return isinstance(error, MemoryError) or "out of memory" in text or "allocate memory" in text


def _describe_out_of_memory(error: BaseException) -> str:
    asked = re.search(r"tried to allocate ([0-9.]+ ?[KMGT]iB|[0-9]+ bytes)", str(error), re.IGNORECASE)
    size = asked and (f"{int(asked[1].split()[0]) / 2**30:.1f} GiB" if asked[1].endswith("bytes") else asked[1])
    detail = f" (an allocation of {size} failed)" if size else ""
    return (
        f"out of memory{detail}; what ladd had written is intact (files are written whole, a run resumes from its last "
        f"checkpoint): reduce the batch size or the sequence length, or free memory, and run the command again"
    )


def _describe_os_error(error: OSError) -> str:
    where = f" ({error.filename})" if error.filename else ""
    if error.errno in _DISK_FULL:  # ladd writes every file whole, so what existed is still there
        return f"{error.strerror}{where}: the disk is full or a size limit applies; free space and run it again"
    return f"{error.strerror or error}{where}"


