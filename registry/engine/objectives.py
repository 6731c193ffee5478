"""The objective a run trains: the ``loss`` slot's component, or the model's own bound when the slot is empty."""
from __future__ import annotations

from torch import Tensor

from registry.interfaces import Objective, ObjectiveStep, TrainableModel


class ModelBound(Objective):
    """The model's own variational bound (``TrainableModel.loss``): the LADD objective, MDLM's without a latent
    channel, LLaDA's SFT loss on instruction data. It draws from torch's global stream, as training always has."""

    terms = ("token", "latent", "aux")

    def loss(self, model: TrainableModel, batch: Tensor, step: ObjectiveStep) -> dict[str, Tensor]:
        return model.loss(batch, shard=step.shard, padding=step.padding, context=step.context)


def objective_of(built: Objective | None) -> Objective:
    """What a run trains: the ``loss`` slot's objective, else the model's own bound."""
    return ModelBound() if built is None else built
