"""``ladd reward``: a run's completions of held-out prompts scored by a reward, the run's own or one named; the same
numbers for the same seed, every completion written when asked, and refusals in one line."""
from __future__ import annotations

import json

import pytest

import registry
from registry.config.composition import compose
from registry.training.loop import train

pytestmark = pytest.mark.slow  # tiny training runs

TINY = [
    "backbone.hidden=16", "backbone.layers=1", "backbone.heads=2", "backbone.mlp_hidden=32", "train.batch_size=4",
    "train.progress=false", "train.stages.stage1.steps=2", "train.init_from=null",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root, reg = tmp_path_factory.mktemp("runs"), registry.load()
    train(compose(["experiment=demo/arith_sft", *TINY], reg), root / "sft", reg)
    rl = [*TINY, "loss.group=2", "loss.steps=2", "train.lora.rank=2", "loss.reward_options.score=2.0"]
    train(compose(["experiment=demo/arith_grpo", *rl], reg), root / "grpo", reg)
    return root


def _reward(capsys, *args):
    from registry.cli import main

    try:
        status = main(["reward", *map(str, args)])
    except SystemExit as exit:
        status = exit.code
    return status, capsys.readouterr()


def test_scores_are_written_and_repeat_for_a_seed(runs, tmp_path, capsys):
    args = ("--reward", "format", "--reward-option", "pattern=.*[0-9].*", "--prompts", "3", "--group", "2",
            "--steps", "4")
    written = ("--out", tmp_path / "a.json", "--completions", tmp_path / "c.jsonl")
    status, out = _reward(capsys, runs / "sft", *args, *written)
    assert status == 0, out.err
    first = json.loads((tmp_path / "a.json").read_text())
    assert (first["reward"], first["prompts"], first["group"], first["split"]) == ("format", 3, 2, "test")
    records = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert len(records) == 6 and first["mean"] == pytest.approx(sum(r["reward"] for r in records) / 6)
    assert first["per_prompt"] == pytest.approx([(records[2 * i]["reward"] + records[2 * i + 1]["reward"]) / 2
                                                 for i in range(3)])
    status, _ = _reward(capsys, runs / "sft", *args, "--out", tmp_path / "b.json")
    assert status == 0 and json.loads((tmp_path / "b.json").read_text())["mean"] == first["mean"]


def test_a_run_trained_with_a_reward_is_scored_by_it_in_the_run(runs, capsys):
    status, out = _reward(capsys, runs / "grpo", "--prompts", "2", "--group", "2", "--steps", "4")
    assert status == 0, out.err
    result = json.loads((runs / "grpo" / "reward_exact_match.json").read_text())
    assert result["reward"] == "exact_match" and set(result["per_prompt"]) <= {0.0, 1.0, 2.0}  # its score of 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "was trained with no reward: name one with --reward NAME"),
        (("--reward-option", "score=2"), "--reward-option sets an option of --reward NAME"),
        (("--reward", "exact_mach"), "exact_mach"),
        # the increments data's test split holds 250 questions: more would score some twice as different prompts
        (("--reward", "exact_match", "--prompts", "251"), "--prompts 251 is more than the 250 rows of split 'test'"),
    ],
)
def test_refusals_are_one_line(runs, capsys, args, message):
    status, out = _reward(capsys, runs / "sft", *args)
    assert status != 0 and message in out.err and len(out.err.strip().splitlines()) == 1
