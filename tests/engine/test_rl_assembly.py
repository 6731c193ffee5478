"""The loss slot and the reward its objective names: an empty loss slot trains the model's own bound as before;
what an RL objective needs is refused in one line before anything trains; rollouts' completions, advantages and the
gathering of processes' rows."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import torch

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment, check_installed
from registry.engine.objectives import ModelBound
from registry.errors import IncompatibleComponentsError, LaddError
from registry.interfaces import ObjectiveStep, context_of
from registry.toolkit.rollouts import answer_positions, group_advantages, prompts_of
from registry.training.metrics_file import METRICS_COLUMNS, metrics_columns

TINY_NET = ["backbone.hidden=16", "backbone.layers=1", "backbone.heads=2", "backbone.mlp_hidden=32"]
RL_DOCS = Path(__file__).parents[2] / "docs" / "rl.md"


def _documented_trainings() -> list[list[str]]:
    """The overrides of every ``ladd train`` command that docs/rl.md shows."""
    lines = RL_DOCS.read_text().splitlines()
    return [shlex.split(line.split(" #")[0])[2:] for line in lines if line.startswith("ladd train ")]


@pytest.fixture(scope="module")
def reg():
    return registry.load()


def test_an_empty_loss_slot_trains_the_models_own_bound_with_the_same_metrics_columns(reg):
    experiment = build_experiment(compose(["experiment=demo/arith_sft", *TINY_NET], reg), reg)
    assert isinstance(experiment.objective, ModelBound)
    assert metrics_columns(experiment.objective.terms) == METRICS_COLUMNS == (
        "stage", "step", "loss", "token", "latent", "aux", "seconds"
    )
    batch = next(experiment.dataset.batches(4, 0))
    context = context_of(experiment.dataset, batch)
    torch.manual_seed(1)
    terms = experiment.objective.loss(experiment.model, batch, ObjectiveStep(1, 0, 0, None, None, context))
    torch.manual_seed(1)
    assert torch.equal(terms["loss"], experiment.model.loss(batch, context=context)["loss"])


@pytest.mark.parametrize("overrides", _documented_trainings(), ids=" ".join)
def test_every_training_the_rl_docs_show_composes_and_builds(reg, overrides):
    # at a tiny size, from random weights (the warm start is the SFT run the docs train first)
    experiment = build_experiment(compose([*overrides, "train.init_from=null", *TINY_NET], reg), reg)
    assert experiment.model is not None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["loss=grpo", "train.lora.rank=0"],
            r"loss 'grpo' takes the frozen base under LoRA adapters .*train.lora.rank=0",
        ),
        (["loss=spg", "loss.reward=exact_mach"], r"unknown reward 'exact_mach'.*exact_match"),
    ],
)
def test_what_an_objective_lacks_is_refused_in_one_line_before_training(reg, overrides, message):
    with pytest.raises(LaddError, match=message) as caught:
        build_experiment(compose(["experiment=demo/arith_sft", *TINY_NET, "train.lora.rank=4", *overrides], reg), reg)
    assert "\n" not in str(caught.value)


def test_the_objectives_reward_is_recorded_beside_it_and_a_missing_one_is_named_in_one_line(reg):
    """The reward an objective names is resolved by the core and recorded as its ``nested`` choice; a run whose reward
    came from a plugin that is gone is refused naming it and the install that brings it back."""
    cfg = compose(["experiment=demo/arith_grpo", "train.init_from=null", *TINY_NET, "loss.reward=format"], reg)
    experiment = build_experiment(cfg, reg)
    recorded = experiment.origins()
    reward = recorded["loss"]["nested"]["reward"]
    assert (reward["kind"], reward["qualified"]) == ("reward", "builtin:format")
    assert type(experiment.objective.reward).__name__ == "Format"  # the one the option names, built by the core
    check_installed(recorded, reg, "the run")  # everything it recorded is installed
    reward.update(plugin="answers", name="graded", qualified="answers:graded", distribution="ladd-answers",
                  version="1.2")
    with pytest.raises(LaddError, match=r"the run's loss's reward is reward 'graded' from plugin 'answers' "
                                        r"\(distribution ladd-answers 1.2\), which is not installed") as caught:
        check_installed(recorded, reg, "the run")
    assert "\n" not in str(caught.value)


def test_a_prompt_that_fills_the_model_is_refused_in_one_line(reg):
    dataset = build_experiment(compose(["experiment=demo/arith_sft", *TINY_NET], reg), reg).dataset
    batch = next(dataset.batches(2, 0))
    context = torch.ones_like(batch, dtype=torch.bool)
    with pytest.raises(LaddError, match="the prompt of row 0 takes all 44 positions of the model"):
        prompts_of(batch, context, dataset.tokenizer, dataset.vocab_size, dataset.eos_id)
    with pytest.raises(LaddError, match="rollouts need prompts, but the dataset marks none"):
        prompts_of(batch, None, dataset.tokenizer, dataset.vocab_size, dataset.eos_id)


def test_the_plan_in_the_policy_needs_codes_under_a_masking_process(reg):
    """A continuous latent (Co-LADD) has no one-pass log-probability: refused at the first step, naming the option."""
    cfg = compose(
        [
            "experiment=demo/arith_grpo", "train.init_from=null", *TINY_NET, "latent=continuous", "latent_process=vp",
            "latent_schedule=vp_sqrt", "encoder=dit", "encoder.hidden=16", "encoder.layers=1", "encoder.heads=2",
            "sampler=sequential", "backbone.cond_dim=16",
        ],
        reg,
    )
    experiment = build_experiment(cfg, reg)
    batch = next(experiment.dataset.batches(2, 0))
    step = ObjectiveStep(1, 0, 0, None, None, context_of(experiment.dataset, batch))
    with pytest.raises(IncompatibleComponentsError, match="set loss.latent_in_policy=false"):
        experiment.objective.loss(experiment.model.train(), batch, step)


def test_completions_end_at_their_first_end_of_document_id():
    eos = 9
    tokens = torch.tensor([[1, 2, 3, 9, 4, 9], [1, 2, 3, 4, 5, 6], [1, 9, 3, 9, 9, 9]])
    context = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    expected = torch.tensor(
        [[0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 0, 0]], dtype=torch.bool
    )  # an end inside the prompt is the prompt's; a row without one runs to the end
    assert torch.equal(answer_positions(tokens, context, eos), expected)
    assert torch.equal(answer_positions(tokens, context, None), ~context)


def test_group_advantages_centre_each_group_and_count_flat_ones():
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0, 2.0, 2.0], dtype=torch.float64)
    advantages, flat = group_advantages(rewards, 3, scale=False)
    assert torch.allclose(advantages, torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0, 0], dtype=torch.float64))
    assert flat.tolist() == [False, True]
    scaled, _ = group_advantages(rewards, 3, scale=True)
    std = torch.tensor([1.0, 0.0, 0.0]).std()
    assert torch.allclose(scaled[:3], advantages[:3] / (std + 1e-4)) and torch.equal(scaled[3:], advantages[3:])


def test_processes_rows_are_gathered_in_the_global_batchs_order(monkeypatch):
    """Two processes holding prompts 0, 2 and 1, 3 (their shards' rows): each ends with the whole batch in order."""
    from ladd_plugins.objectives import policy
    from registry.distributed import Shard

    group, prompts = 2, 4
    whole = torch.arange(prompts * group) * 10  # row p * group + g
    parts = [whole.view(prompts, group)[Shard(rank, 2, 0).rows(prompts)].flatten() for rank in (0, 1)]
    monkeypatch.setattr(policy, "gather_rows", lambda local: torch.cat(parts))  # rank order, as torch gathers
    step = ObjectiveStep(1, 0, 0, Shard(0, 2, 0))
    assert torch.equal(policy._Gather(step, prompts, group)(parts[0]), whole)
    stacked = torch.stack([parts[0], parts[0] + 1])
    rank_major = torch.cat([torch.stack([part, part + 1], dim=1) for part in parts])  # gathered along the rows
    monkeypatch.setattr(policy, "gather_rows", lambda local: rank_major)
    assert torch.equal(policy._Gather(step, prompts, group)(stacked, dim=1), torch.stack([whole, whole + 1]))
