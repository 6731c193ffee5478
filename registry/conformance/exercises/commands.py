"""The exercise of a plugin's command: run as ``ladd NAME ...`` with the arguments it declares (``example``), on a tiny
run folder ladd trains for the check and a model folder exported from it, not only its help rendered."""
from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from registry.errors import LaddError
from registry.host.commands import EXAMPLE_FOLDERS
from registry.host.registry import Registry

from .common import ExerciseFailure

#: the promise of a command that declares an example: it runs on a run folder and a model folder
RUNS = "a command (it runs on a run folder: `ladd NAME` with its example arguments)"
#: the tiny run a command is run on: the sawtooth's MDLM preset, one step of a one-layer network
FIXTURE_RUN = [
    "experiment=binsaw/mdlm_cpu",
    "dataset.seq_len=8",
    "backbone.hidden=16",
    "backbone.layers=1",
    "backbone.heads=2",
    "train.batch_size=4",
    "train.warmup_steps=1",
    "train.progress=false",
    "train.stages=[{steps:1}]",
]


def exercise_command(
    name: str, example: Sequence[str], run: Callable[[list[str]], None], folders: Mapping[str, Path]
) -> None:
    """``run([name, *example])`` (ladd's command line, in this process) with ``{run}`` and ``{model}`` in the example's
    arguments standing for ``folders`` (:func:`command_folders`); its output is kept from the check's own."""
    arguments = list(example)
    for placeholder, folder in folders.items():
        arguments = [argument.replace(placeholder, str(folder)) for argument in arguments]
    invocation = " ".join(["ladd", name, *example])  # as declared: the folders' names are the check's own
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            run([name, *arguments])
    except SystemExit as exit:  # argparse refusing the example's arguments, or the command asking to end
        if exit.code not in (0, None):
            said = output.getvalue().strip().splitlines()
            raise ExerciseFailure(
                f"`{invocation}` exits with status {exit.code}{': ' + said[-1] if said else ''}", RUNS
            ) from None
    except LaddError as error:  # ladd's own line: a command's failure already names it and its plugin
        raise ExerciseFailure(f"`{invocation}` fails: {error}", RUNS) from error
    except Exception as error:
        raise ExerciseFailure(f"`{invocation}` fails: {type(error).__name__}: {error}", RUNS) from error


@contextlib.contextmanager
def command_folders(examples: Iterable[Sequence[str]], registry: Registry) -> Iterator[dict[str, Path]]:
    """The folders the examples' arguments name (``{run}``: a tiny run trained for the check, ``{model}``: a model
    folder exported from it), made once and removed afterwards."""
    named = [argument for example in examples for argument in example]
    wanted = {placeholder for placeholder in EXAMPLE_FOLDERS if any(placeholder in argument for argument in named)}
    with tempfile.TemporaryDirectory(prefix="ladd-command-check-") as scratch:
        if not wanted:
            yield {}
            return
        from registry.config.composition import compose  # torch and Lightning: only when a command is run
        from registry.engine.export import export
        from registry.training.console import LIGHTNING_NOTICES
        from registry.training.loop import train

        run_dir = Path(scratch) / "run"
        notices = logging.getLogger(LIGHTNING_NOTICES)
        level = notices.level
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
            io.StringIO()
        ):
            warnings.simplefilter("ignore")  # the training loop's own notices are not the check's
            notices.setLevel(logging.WARNING)
            try:
                train(compose([*FIXTURE_RUN, f"run_dir={run_dir}"], registry), run_dir, registry)
            finally:
                notices.setLevel(level)
        folders = {"{run}": run_dir}
        if "{model}" in wanted:
            folders["{model}"] = export(run_dir, Path(scratch) / "model", registry)
        yield folders
