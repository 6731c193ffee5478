"""lm-eval tasks for ladd: lm-eval's own, ladd's shipped offline tasks and a user's task folders (``--include-path``).

Task folders are indexed by lm-eval's ``TaskManager``. When every asked task lies in ladd's and the user's folders,
lm-eval's index of its thousands of own tasks is not built (it takes seconds). A task YAML's local data files
(``dataset_kwargs: {data_files: ...}``) may be written relative to the YAML's folder: they are read from there,
wherever the command runs. A task folder's YAML may import Python from that folder (lm-eval's ``!function``): use
task folders you trust.
"""
from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

from lm_eval import simple_evaluate
from lm_eval.api.model import LM
from lm_eval.tasks import TaskManager
from lm_eval.tasks._yaml_loader import load_yaml

from registry.errors import LaddError, first_line

__all__ = ["SHIPPED", "evaluate_tasks", "task_manager"]

#: ladd's own offline tasks, always on the search path
SHIPPED = Path(__file__).parent / "tasks"
log = logging.getLogger(__name__)


def task_manager(names: list[str], include: list[Path]) -> TaskManager:
    """A task manager that knows ``names`` (lm-eval's own tasks indexed only when some name needs them); a name
    lm-eval does not know is refused with lm-eval's own message."""
    for folder in include:
        if not folder.is_dir():
            raise LaddError(f"--include-path {folder} is not a folder of lm-eval task YAML files")
    folders = [SHIPPED, *include]
    manager = TaskManager(include_path=[str(f) for f in folders], include_defaults=False)
    if any(name not in manager.all_tasks for name in names):
        log.info("indexing lm-eval's own tasks")
        manager = TaskManager(include_path=[str(f) for f in folders])
    for name in names:
        if name not in manager.all_tasks:
            try:
                manager.load([name])  # a YAML path loads; an unknown name fails at once, before any data is read
            except KeyError as error:
                broken = _unreadable(include)
                detail = f"; {broken}" if broken else ""
                raise LaddError(f"lm-eval: {first_line(error).strip(chr(34))}{detail}") from None
    return manager


def _unreadable(folders: list[Path]) -> str:
    """The first task YAML of ``folders`` that does not parse, and why (lm-eval's index leaves such a file out
    without a word, so its task is then unknown); empty when every one parses."""
    for folder in folders:
        for path in sorted(folder.rglob("*.yaml")):
            try:
                load_yaml(str(path), resolve_func=False)
            except Exception as error:  # noqa: BLE001 - YAML's and the loader's own errors, said in one line
                mark = getattr(error, "problem_mark", None)
                where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
                why = getattr(error, "problem", None) or first_line(error)
                return f"{where} does not parse as task YAML ({why}): fix it, or name another task"
    return ""


def _spec(manager: TaskManager, name: str) -> str | dict[str, Any]:
    """``name``, or its config with local data files made absolute when its YAML names them relative to itself."""
    entry = manager.task_index.get(name)
    path = getattr(entry, "yaml_path", None)
    if path is None:
        return name
    config = load_yaml(path, resolve_func=True)
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    if not isinstance(files, dict):
        return name
    folder = Path(path).parent
    resolved = {
        split: str(folder / value) if isinstance(value, str) and (folder / value).is_file() else value
        for split, value in files.items()
    }
    if resolved == files:
        return name
    changed = copy.deepcopy(config)
    changed["dataset_kwargs"]["data_files"] = resolved
    return changed


def evaluate_tasks(
    lm: LM, names: list[str], include: list[Path], limit: int | None, num_fewshot: int | None, seed: int,
    chat_template: bool = False, log_samples: bool = False,
) -> dict[str, Any]:
    """lm-eval's results dictionary of ``names`` (``simple_evaluate``), every seed set to ``seed``; with
    ``chat_template``, each request's context framed in the model tokenizer's chat template; with ``log_samples``,
    lm-eval's record of every request under ``samples``."""
    manager = task_manager(names, include)
    specs = [_spec(manager, name) for name in names]
    try:
        results = simple_evaluate(
            model=lm, tasks=specs, num_fewshot=num_fewshot, limit=limit, task_manager=manager, log_samples=log_samples,
            random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
            apply_chat_template=chat_template,
        )
    except (OSError, ConnectionError, KeyError) as error:  # a task's data that cannot be read (offline, missing)
        raise LaddError(f"lm-eval could not load a task: {first_line(error)}") from error
    if results is None:
        raise LaddError("lm-eval returned no results (not the first process)")
    return dict(results)
