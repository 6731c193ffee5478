"""The exercise of an importer: its example checkpoint imported as ``ladd import`` does, the model folder loaded and
sampled, its logits held against the checkpoint's own (``Importer.reference``) and its tokenizer against the network's
token table (``Importer.vocabulary``)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from registry.errors import MissingResourceError
from registry.host.model_folders import PluginImporter
from registry.host.plugin_code import FAULTS, PluginCode, describe
from registry.host.registry import Registry
from registry.interfaces import mask_id

from .common import BATCH, ExerciseFailure, during, expect, generator

#: the promise of an importer: its example imports into a model that loads, predicts and samples
IMPORTS = "Importer (its example imported, loaded and sampled)"
#: the promise of ``Importer.reference``
REFERENCE = "Importer.reference (the imported logits equal the checkpoint's own)"
#: the promise of a tokenizer an importer's model carries: one token per row of the network's table, the mask last
TOKENIZER = "the tokenizer's vocabulary matching the network's token table"
#: sampling steps of the check: enough to reveal every position of a tiny example in a few calls
STEPS = 4


def exercise_importer(entry: PluginImporter, registry: Registry) -> None:
    """The importer's own tiny checkpoint imported as ``ladd import`` does, the model folder read back: token logits of
    the right shape, finite where not ruled out, equal to the checkpoint's own where the importer computes them;
    samples of real ids that its tokenizer decodes; a tokenizer of one token per row of the table."""
    from registry.engine.importing import import_checkpoint
    from registry.engine.loading import from_pretrained

    importer = entry.importer()
    with tempfile.TemporaryDirectory(prefix="ladd-import-check-") as scratch:
        source = _plugin_call(lambda: importer.example(Path(scratch) / "checkpoint"), "example()")
        if source is None:
            raise MissingResourceError("it offers no example checkpoint (Importer.example)")
        folder = import_checkpoint(entry, source, Path(scratch) / "model", [], registry)
        experiment = from_pretrained(folder, registry)
        model = experiment.model
        tokens = torch.full((BATCH, model.seq_len), mask_id(model.vocab_size))
        tau = torch.full((BATCH,), 0.5)
        with during("predicting with the imported model", IMPORTS), torch.no_grad():
            y_t = None if model.latent is None else model.latent_prior(BATCH, generator())
            logits = model.predict(tokens, tau, y_t, None if y_t is None else tau).tokens
        expected = (BATCH, model.seq_len, model.vocab_size)
        expect(
            logits is not None and tuple(logits.shape) == expected and _ruled_out_or_finite(logits),
            f"the imported model's token logits must be of shape {expected}, finite or -inf (a token the network "
            f"never gives), with some token finite at every position",
            IMPORTS,
        )
        checkpoint = _plugin_call(lambda: importer.read(source), "read()")
        if model.latent is None:
            _check_reference(importer, checkpoint, model)
        _check_tokenizer(importer, checkpoint, experiment.dataset.tokenizer, model.vocab_size)
        _check_samples(experiment)


def _plugin_call(call: Any, what: str) -> Any:
    """An importer method's result; its exception is a failure naming the method."""
    with PluginCode() as code:
        try:
            return call()
        except FAULTS as error:
            if not code.is_fault(error):
                raise
            raise ExerciseFailure(f"{what} raised {describe(error)}", IMPORTS) from error


def _check_reference(importer: Any, checkpoint: Any, model: Any) -> None:
    """The imported model's logits of some tokens (half of them masked) equal the checkpoint's own, where the importer
    computes those (``reference``)."""
    draws = generator()
    tokens = torch.randint(model.vocab_size, (BATCH, model.seq_len), generator=draws)
    tokens[torch.rand(tokens.shape, generator=draws) < 0.5] = mask_id(model.vocab_size)
    tau = torch.full((BATCH,), 0.5)
    wanted = _plugin_call(lambda: importer.reference(checkpoint, tokens, tau), "reference()")
    if wanted is None:
        return
    with during("predicting with the imported model", IMPORTS), torch.no_grad():
        found = model.predict(tokens, tau, None, None).tokens.float()
    wanted = torch.as_tensor(wanted).float()
    expect(
        tuple(wanted.shape) == tuple(found.shape),
        f"reference() gives logits of shape {tuple(wanted.shape)}, the imported model {tuple(found.shape)}",
        REFERENCE,
    )
    finite = torch.isfinite(wanted) & torch.isfinite(found)
    gap = float((wanted - found)[finite].abs().max()) if bool(finite.any()) else 0.0
    scale = max(1.0, float(wanted[finite].abs().max())) if bool(finite.any()) else 1.0
    same_infinities = torch.equal(torch.isfinite(wanted), torch.isfinite(found))
    expect(
        same_infinities and gap <= 1e-3 * scale,
        f"the imported model's token logits differ from the checkpoint's own (reference()) by up to {gap:.3g}",
        REFERENCE,
    )


def _check_tokenizer(importer: Any, checkpoint: Any, tokenizer: Any, vocab_size: int) -> None:
    """A tokenizer the model carries has one token per row of the table and the mask last (``len == K + 1``), and
    gives each id the token the checkpoint's vocabulary records for that row."""
    vocabulary = _plugin_call(lambda: importer.vocabulary(checkpoint), "vocabulary()")
    if vocabulary is not None:
        expect(
            len(vocabulary) == vocab_size,
            f"vocabulary() lists {len(vocabulary)} tokens for a network of {vocab_size} token ids",
            TOKENIZER,
        )
    if tokenizer is None:
        return
    expect(
        len(tokenizer) == vocab_size + 1,
        f"the model's tokenizer holds {len(tokenizer)} tokens, the network's table {vocab_size} and the mask",
        TOKENIZER,
    )
    if vocabulary is None:
        return
    given = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    wrong = next((index for index, (a, b) in enumerate(zip(given, vocabulary, strict=True)) if a != b), None)
    expect(
        wrong is None,
        f"the model's tokenizer gives id {wrong} the token {given[wrong] if wrong is not None else ''!r}, the "
        f"checkpoint's vocabulary {vocabulary[wrong] if wrong is not None else ''!r}",
        TOKENIZER,
    )


def _check_samples(experiment: Any) -> None:
    """The imported model's own sampler draws real token ids, which its tokenizer (if any) decodes."""
    model, tokenizer = experiment.model, experiment.dataset.tokenizer
    with during(f"sampling the imported model ({STEPS} steps)", IMPORTS), torch.no_grad():
        out = experiment.sampler.sample(model, BATCH, STEPS, generator())
    tokens = out.tokens
    # a network that proposes its own mask (mask_column) leaves that position masked, as its own code does
    top = model.vocab_size if model.mask_column is None else mask_id(model.vocab_size) + 1
    expect(
        tokens.shape[0] == BATCH and bool(((tokens >= 0) & (tokens < top)).all()),
        f"samples of the imported model hold ids outside 0..{top - 1}",
        IMPORTS,
    )
    if tokenizer is not None:
        with during("decoding the imported model's samples with its tokenizer", TOKENIZER):
            tokenizer.batch_decode(tokens.tolist())


def _ruled_out_or_finite(logits: torch.Tensor) -> bool:
    """Every logit finite or -inf (LLaDA's own mask token, which its network never predicts), none all -inf."""
    return bool((torch.isfinite(logits) | torch.isneginf(logits)).all() and torch.isfinite(logits.amax(-1)).all())
