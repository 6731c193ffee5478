"""Clean latents on disk: what ``ladd encode`` writes, marked with the identity of the model that encoded them.

A latent file is safetensors (checksummed as ladd's weights are) holding ``latents`` ``[R, ...]``, one row per
reference, and in its metadata the format, the digest of the encoding model's weights and the latent's shape. A
model reads back only latents of its own shape and identity: another model's latents mean nothing to it, even
when their shape fits.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from registry.errors import LaddError
from registry.storage.weights import read_tensors, save_tensors, state_digest

from .model import DiffusionModel

FORMAT = "ladd-latents/1"
LATENTS = "latents"
_FORMAT_KEY, _MODEL_KEY, _SHAPE_KEY = "format", "ladd.model", "ladd.latent_shape"
_ENCODE = "encode the references with this model: ladd encode MODEL --input FILE --out LATENTS.safetensors"


def check_has_latent(model: DiffusionModel, what: str) -> None:
    """Refuse a model without a latent channel: ``what`` (a command, a flag) needs one to read or hold."""
    if model.latent is None:
        raise LaddError(
            f"{what} needs a model with a latent channel, but this one has none (latent=null: an MDLM model); "
            f"give a Co-LADD or Di-LADD run or export"
        )


def encode_rows(model: DiffusionModel, tokens: Tensor, batch_size: int) -> Tensor:
    """``model.encode`` of the rows of ``tokens`` ``[R, S]``, ``batch_size`` rows at a time, gathered on the CPU."""
    return torch.cat([model.encode(chunk).cpu() for chunk in tokens.split(batch_size)])


def identity(model: DiffusionModel) -> str:
    """What names a model in a latent file: the digest of its weights (a run and its export share it)."""
    return state_digest(model)


def latent_shape(model: DiffusionModel) -> tuple[int, ...]:
    """The shape of one clean latent of ``model`` (its null latent's, without the batch)."""
    return tuple(model.latent_channel()[0].null(1, torch.device("cpu")).shape[1:])


def save_latents(path: str | Path, model: DiffusionModel, latents: Tensor) -> Path:
    """``latents`` ``[R, ...]`` of ``model`` as a latent file, written atomically."""
    metadata = {_FORMAT_KEY: FORMAT, _MODEL_KEY: identity(model), _SHAPE_KEY: json.dumps(list(latent_shape(model)))}
    return save_tensors({LATENTS: latents.detach().cpu().contiguous()}, path, metadata)


def load_latents(path: str | Path, model: DiffusionModel) -> Tensor:
    """The latents of a file ``ladd encode`` wrote with ``model``; any other file is refused in one line."""
    path = Path(path)
    if not path.is_file():
        what = "is not a regular file (a device, pipe or folder)" if path.exists() else "does not exist"
        raise LaddError(f"latent file {path} {what}; {_ENCODE}")
    tensors, metadata = read_tensors(path)
    if metadata.get(_FORMAT_KEY) != FORMAT or LATENTS not in tensors:
        raise LaddError(f"{path} is not a latent file written by `ladd encode` (format {FORMAT}); {_ENCODE}")
    latents, shape = tensors[LATENTS], latent_shape(model)
    dtype = model.latent_channel()[0].null(1, torch.device("cpu")).dtype
    held, wanted = f"{latents.dtype} of shape {list(latents.shape[1:])}", f"{dtype} of shape {list(shape)}"
    if metadata.get(_MODEL_KEY) != identity(model):
        detail = "" if held == wanted else f" (its latents are {held}, this model's {wanted})"
        raise LaddError(
            f"{path} was encoded by another model (weights {str(metadata.get(_MODEL_KEY))[:12]}, this model's "
            f"{identity(model)[:12]}), whose latents mean nothing to this one{detail}; {_ENCODE}"
        )
    if held != wanted or latents.shape[0] == 0:
        found = f"latents {held}" if len(latents) else "no latents"
        raise LaddError(
            f"{path} holds {found}, but this model encodes {wanted}, as `ladd encode` writes them: the file was "
            f"converted or edited; {_ENCODE}"
        )
    return latents
