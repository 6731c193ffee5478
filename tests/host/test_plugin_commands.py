"""A plugin's command (``ladd_commands``) runs under ladd's guard: what it raises itself is one line naming it and its
plugin, a KeyboardInterrupt it raises without a Ctrl-C among them, while the user's Ctrl-C still ends ladd."""
from __future__ import annotations

import argparse
import signal

import pytest

from registry.cli.context import run_command
from registry.errors import LaddError
from registry.host.commands import CommandHook, add_plugin_commands
from registry.host.component import Origin
from registry.host.registry import Registry


def _handler(run, earlier=False):
    """``ladd act`` of plugin 'acting', whose handler is ``run``, as ladd's main() runs it; ``earlier``: added through
    the deprecated ``add_parser`` with ``set_defaults(run=...)``."""
    def hook(commands):
        if earlier:
            commands.add_parser("act", help="a plugin's command").set_defaults(run=run)
        else:
            commands.add_command("act", run, help="a plugin's command")

    top = argparse.ArgumentParser()
    hooks = [CommandHook(Origin("acting", "acting", "1"), hook)]
    added = add_plugin_commands(top.add_subparsers(dest="command"), hooks)
    assert not added.problems
    args = top.parse_args(["act"])
    return lambda: run_command(args, Registry([]))


def _interrupts(args, ladd):
    raise KeyboardInterrupt


def _fails(args, ladd):
    raise ValueError("no such thing")


@pytest.mark.parametrize("run, message", [
    (_interrupts, "command 'act' of plugin 'acting' failed: KeyboardInterrupt: it raises it itself (no Ctrl-C was "
     "pressed), which would end every ladd command"),
    (_fails, "command 'act' of plugin 'acting' failed: ValueError: no such thing"),
])
@pytest.mark.parametrize("earlier", [False, True], ids=["add_command", "add_parser"])
def test_what_a_plugins_command_raises_itself_is_one_line_naming_it(run, message, earlier):
    with pytest.raises(LaddError) as refused:
        _handler(run, earlier)()
    assert str(refused.value) == message


def test_the_users_ctrl_c_during_a_plugins_command_still_interrupts_it():
    def pressed(args, ladd):
        signal.raise_signal(signal.SIGINT)  # as the terminal sends it
        raise AssertionError("never reached: the interrupt ends the command")

    # Python's own handler, as in a terminal: a job started in the background inherits SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _handler(pressed)()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_plugins_command_keeps_its_output_on_stdout(capsys):
    def prints(args, ladd):
        print("a table")

    _handler(prints)()
    assert capsys.readouterr().out == "a table\n"
