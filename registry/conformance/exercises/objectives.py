"""The exercise of an objective: one step of a tiny instruction-tuning experiment whose loss it is."""
from __future__ import annotations

import torch

from registry.errors import IncompatibleComponentsError, MissingResourceError
from registry.host.component import Component
from registry.host.registry import Registry
from registry.interfaces import ObjectiveStep, context_of

from .common import during, expect

#: a tiny instruction-tuning experiment: the shipped arithmetic pairs, one id per character, a one-layer network
#: under LoRA adapters (an objective may take the frozen base as its reference)
SETUP = (
    "experiment=demo/arith_sft", "backbone.hidden=16", "backbone.layers=1", "backbone.heads=2",
    "backbone.mlp_hidden=32", "train.batch_size=2", "train.lora.rank=2",
)


def exercise_objective(component: Component, registry: Registry) -> None:
    """One step of a tiny instruction-tuning experiment whose loss slot holds the objective (with its default
    options): a finite scalar loss that reaches the parameters, only the declared terms, the checkpointed state taken
    back, and the trainable set it declares (``reach``) a scalar too."""
    from registry.config.composition import compose
    from registry.engine.adapters import adapt
    from registry.engine.assembly import build_experiment

    settings = compose([*SETUP, f"loss={component.qualified}"], registry)
    try:
        experiment = build_experiment(settings, registry)
    except IncompatibleComponentsError as error:
        raise MissingResourceError(f"needs an experiment ladd's tiny check cannot supply ({error})") from None
    adapt(experiment.model, settings.train)
    objective, model, dataset = experiment.objective, experiment.model.train(), experiment.dataset
    batch = next(dataset.batches(2, 0))
    step = ObjectiveStep(1, 0, 7, None, None, context_of(dataset, batch))
    with during("one step's loss"):
        terms = objective.loss(model, batch, step)
    loss = terms.get("loss") if isinstance(terms, dict) else None
    expect(
        isinstance(loss, torch.Tensor) and loss.dim() == 0 and bool(torch.isfinite(loss)) and loss.requires_grad,
        f"loss() must return a finite scalar 'loss' with a gradient, got {loss!r}",
    )
    extra = sorted(set(terms) - {"loss"} - set(objective.terms))
    expect(not extra, f"loss() returns terms {extra} that the objective does not declare (Objective.terms)")
    with during("taking back the checkpointed state"):
        objective.load_state_dict(objective.state_dict())
    with during("reach"):
        reached = objective.reach(model)
    expect(isinstance(reached, torch.Tensor) and reached.dim() == 0, "reach() must return a scalar")
