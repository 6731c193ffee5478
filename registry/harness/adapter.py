"""``LaddLM``: any ladd model as an lm-eval model, registered under the name ``ladd``.

- ``loglikelihood``: minus the bound of :mod:`registry.engine.likelihood` on ``-log p(continuation | context)``: for a
  masked model an unbiased Monte Carlo estimate of it (LLaDA's estimator, ``mc_num`` draws), which may exceed the
  log-likelihood, or the bound itself (``likelihood="exact"`` enumerates the masked sets of a short continuation); a
  causal model's exact log-likelihood; ``is_greedy`` by the model's greedy decoding of the continuation.
- ``loglikelihood_rolling``: a document's bound, chunk by chunk (:mod:`.requests`), the estimator of ``ladd eval``.
- ``generate_until``: the experiment's sampler (any registered one, with its options) with the context as fixed
  tokens, cut at every stop string and at the end-of-document token.

Requests are turned into rows (:mod:`.requests`) as the model's config says its family is scored (``harness``: rows
filled to the model's length or its tokens alone, the tokenizer's special tokens, a BOS before each context, an EOS
after each continuation); equal rows are scored once, and every row draws from a generator seeded by the run's seed and
the row itself, so results depend on neither the batch size nor the order.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from registry.config.settings import INFERENCE_PRECISIONS, HarnessConfig
from registry.engine.assembly import Experiment
from registry.engine.devices import checked_device
from registry.engine.likelihood import MODES, bound, check_bound, greedy_matches
from registry.engine.sampling import sample
from registry.errors import LaddError
from registry.interfaces import mask_id
from registry.ranges import check_choice, check_range
from registry.toolkit.progress import Progress

from .requests import Window, check_ids, encode, encode_pair, windows

__all__ = ["HarnessSettings", "LaddLM", "RequestCounts"]

log = logging.getLogger(__name__)
#: Seed distance between groups of generation requests (each group's chunks step by CHUNK_SEED_STRIDE).
_GROUP_SEED_STRIDE = 1_000_000_007
#: lm-eval's generation keywords this adapter reads; the others (temperature, do_sample, ...) belong to the sampler
_READ_KWARGS = ("until", "max_gen_toks")


@dataclass
class HarnessSettings:
    """How the adapter scores and generates."""

    mc_num: int = 128  # Monte Carlo draws per row of the likelihood bound
    likelihood: str = "mc"  # mc: LLaDA's Monte Carlo estimator; exact: every masked set of a short continuation
    batch_size: int = 16  # rows per network call
    seed: int = 0  # seeds every row's draws and the sampler's chunks
    gen_steps: int | None = None  # token steps of generate_until (None: the model's length S)
    # the networks' precision: 32-true, auto or bf16-mixed (bf16 rounds a Gaussian latent's prediction far more coarsely
    # than the bound's weights near t = 0 forgive)
    precision: str = "32-true"

    def __post_init__(self) -> None:
        check_range("mc_num", self.mc_num, 1)
        check_choice("likelihood", self.likelihood, MODES)
        check_range("batch_size", self.batch_size, 1)
        check_range("seed", self.seed, 0)
        check_range("gen_steps", self.gen_steps, 1, optional=True)
        check_choice("precision", self.precision, INFERENCE_PRECISIONS)


@dataclass
class RequestCounts:
    """What the adapter did, for the provenance record."""

    loglikelihood: int = 0
    rolling: int = 0
    generate: int = 0
    rows: int = 0  # distinct rows scored
    cut: int = 0  # requests whose rows condition on fewer preceding tokens than they hold
    ignored_generation_kwargs: set[str] = field(default_factory=set)


@register_model("ladd")
class LaddLM(LM):
    """A ladd model (run folder or model folder) scored by lm-eval."""

    def __init__(
        self,
        pretrained: str | None = None,
        experiment: Experiment | None = None,
        settings: HarnessSettings | None = None,
        scoring: HarnessConfig | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        if experiment is None:
            device = checked_device(str(options["device"]), "device") if options.get("device") else None
            experiment, scoring = _load(pretrained)
            if device is not None:
                experiment.model.to(device)
        # lm-eval passes its own batch_size (possibly "auto"), max_batch_size and device: a whole batch size is taken
        # from them, the device only for a model loaded here
        given = {key: value for key, value in options.items() if key in HarnessSettings.__dataclass_fields__}
        if not isinstance(given.get("batch_size"), int):
            given.pop("batch_size", None)
        self.settings = settings or HarnessSettings(**given)
        self.experiment = experiment
        self.model = experiment.model.eval()
        self.tokenizer = experiment.dataset.tokenizer
        if self.tokenizer is None:
            raise LaddError(
                f"this model's data ({type(experiment.dataset).__name__}) has no tokenizer: lm-eval's text tasks need "
                f"a model trained on text (dataset=text)"
            )
        self.clean_latent = experiment.sampler.conditions_on_clean_latent
        self.scoring = scoring or HarnessConfig()
        self.counts = RequestCounts()

    @property
    def max_length(self) -> int:
        return self.model.seq_len

    @property
    def eot_token_id(self) -> int | None:
        return self.experiment.dataset.eos_id

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", type(self.tokenizer).__name__))

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The tokenizer's chat template, which lm-eval records, when asked for (``--chat-template``)."""
        return getattr(self.tokenizer, "chat_template", None) if chat_template else None

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """A request's turns as the tokenizer's chat template writes them (lm-eval's ``apply_chat_template``)."""
        check_chat_template(self.tokenizer)
        return str(self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt
        ))

    def get_model_info(self) -> dict[str, Any]:
        """What lm-eval records of the model in its results: its components and how its requests are scored."""
        return {
            "model_components": {slot: c.get("name") for slot, c in self.experiment.origins().items()},
            "scoring": self.scoring_record(),
        }

    def scoring_record(self) -> dict[str, Any]:
        """How requests become rows (the model's ``harness`` settings) and how the network's mask is treated."""
        rows = ("the context and continuation alone" if self.scoring.length == "variable"
                else f"filled to the model's {self.model.seq_len} positions with masks")
        mask = ("kept in the softmax, as the family's code keeps it" if self.model.mask_column is not None
                else "no probability (SUBS)")
        return {**asdict(self.scoring), "rows": rows, "mask_column": mask}

    # -- likelihoods -------------------------------------------------------------------------------------------

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``(log-likelihood bound, is_greedy)`` per ``(context, continuation)`` request."""
        rows = [self._pair_rows(context, continuation) for context, continuation in (r.args for r in requests)]
        self.counts.loglikelihood += len(rows)
        bounds, greedy = self._score(rows, "loglikelihood", greedy=True)
        return [(-sum(bounds[w] for w in row), all(greedy[w] for w in row)) for row in rows]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """The log-likelihood bound of each whole document."""
        rows = []
        for (text,) in (r.args for r in requests):
            ids = encode(self.tokenizer, text, self.scoring.special_tokens)
            check_ids(ids, self.model.vocab_size, "a document")
            rows.append(self._windows([], ids))
        self.counts.rolling += len(rows)
        bounds, _ = self._score(rows, "loglikelihood_rolling", greedy=False)
        return [-sum(bounds[w] for w in row) for row in rows]

    def _pair_rows(self, context: str, continuation: str) -> list[Window]:
        head, tail = encode_pair(self.tokenizer, self._framed(context), continuation, self.scoring.special_tokens)
        after = [self._eos()] if self.scoring.eos else []
        check_ids([*head, *tail, *after], self.model.vocab_size,
                  f"the request {context[-40:]!r} + {continuation[:40]!r}")
        return self._windows(head, tail, after)

    def _framed(self, context: str) -> str:
        """A context as the family's evaluator reads it: after the tokenizer's BOS text when ``harness.bos``."""
        if not self.scoring.bos:
            return context
        bos = getattr(self.tokenizer, "bos_token", None)
        if not bos:
            raise LaddError("harness.bos=true puts the tokenizer's BOS before each context, but it has none; set "
                            "harness.bos=false")
        return str(bos) + context

    def _eos(self) -> int:
        eos = self.eot_token_id
        if eos is None:
            raise LaddError("harness.eos=true puts EOS after each continuation, but the model's data has none; set "
                            "harness.eos=false")
        return eos

    def _windows(self, context: Sequence[int], continuation: Sequence[int], after: Sequence[int] = ()) -> list[Window]:
        fill = self.scoring.length == "fixed"
        rows = windows(context, continuation, self.model.seq_len, mask_id(self.model.vocab_size), fill, after)
        self.counts.cut += any(w.cut for w in rows)
        return rows

    def _score(
        self, requests: list[list[Window]], what: str, greedy: bool
    ) -> tuple[dict[Window, float], dict[Window, bool]]:
        """The bound (nats) of every distinct row, and whether greedy decoding gives it when asked."""
        settings, model = self.settings, self.model
        check_bound(model, self.clean_latent)
        distinct = list(dict.fromkeys(w for row in requests for w in row))
        self.counts.rows += len(distinct)
        draws = 1 if settings.likelihood == "exact" else settings.mc_num
        group = max(1, 4 * settings.batch_size // draws)
        bounds: dict[Window, float] = {}
        matches: dict[Window, bool] = {}
        lengths = sorted({len(w.tokens) for w in distinct})  # rows of one length per network call
        parts = [[w for w in distinct if len(w.tokens) == n] for n in lengths]
        with Progress(len(distinct), what, unit="rows") as shown:
            for part in (same[i : i + group] for same in parts for i in range(0, len(same), group)):
                tokens = torch.tensor([w.tokens for w in part], dtype=torch.long)
                scored = torch.tensor([w.scored for w in part], dtype=torch.bool)
                estimates = bound(
                    model, tokens, scored, draws, settings.seed, self.clean_latent, settings.batch_size,
                    settings.precision, settings.likelihood,
                )
                bounds.update(zip(part, estimates.mean(dim=1).tolist(), strict=True))
                if greedy:
                    found = greedy_matches(
                        model, tokens, scored, settings.seed, self.clean_latent, settings.batch_size, settings.precision
                    )
                    matches.update(zip(part, found.tolist(), strict=True))
                shown.update(len(part))
        return bounds, matches

    # -- generation --------------------------------------------------------------------------------------------

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """The sampler's continuation of each context, cut at its stop strings (and the end-of-document token)."""
        self.counts.generate += len(requests)
        groups: dict[tuple[tuple[str, ...], int], list[int]] = {}
        for index, (_, kwargs) in enumerate(r.args for r in requests):
            self.counts.ignored_generation_kwargs |= set(kwargs) - set(_READ_KWARGS)
            groups.setdefault(self._stops(kwargs), []).append(index)
        out = [""] * len(requests)
        for number, ((stops, longest), members) in enumerate(groups.items()):
            texts = self._generate([requests[i].args[0] for i in members], stops, longest, number)
            for index, text in zip(members, texts, strict=True):
                out[index] = text
        return out

    def _stops(self, kwargs: dict[str, Any]) -> tuple[tuple[str, ...], int]:
        until = kwargs.get("until") or []
        stops = [until] if isinstance(until, str) else list(until)
        eos = getattr(self.tokenizer, "eos_token", None) or getattr(self.tokenizer, "sep_token", None)
        if eos and eos not in stops:
            stops.append(eos)
        longest = int(kwargs.get("max_gen_toks", 256))
        return tuple(stops), max(1, min(longest, self.model.seq_len - 1))

    def _generate(self, contexts: list[str], stops: Iterable[str], longest: int, number: int) -> list[str]:
        """One group's continuations: contexts keep their last ``S - longest`` tokens (at least one free position)."""
        length, unknown = self.model.seq_len, mask_id(self.model.vocab_size)
        fixed, starts = [], []
        for context in contexts:
            ids = encode(self.tokenizer, self._framed(context), self.scoring.special_tokens)
            check_ids(ids, self.model.vocab_size, f"the context {context[-40:]!r}")
            kept = ids[max(0, len(ids) - (length - longest)) :]
            self.counts.cut += len(kept) < len(ids)
            fixed.append([*kept, *([unknown] * (length - len(kept)))])
            starts.append(len(kept))
        settings = self.settings
        tokens, _ = sample(
            self.experiment, len(contexts), settings.gen_steps or length, settings.batch_size,
            settings.seed + number * _GROUP_SEED_STRIDE, progress=True,
            fixed=torch.tensor(fixed, dtype=torch.long), precision=settings.precision,
        )
        texts = []
        for row, start in zip(tokens.tolist(), starts, strict=True):
            text = self.tokenizer.decode(row[start : start + longest], skip_special_tokens=False)
            for stop in stops:
                text = text.split(stop)[0]
            texts.append(text)
        return texts


def check_chat_template(tokenizer: Any) -> None:
    """Refuse a tokenizer without a chat template, which ``--chat-template`` asks for."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        raise LaddError(f"--chat-template: the model's tokenizer {name} has no chat template; leave the option out")


def _load(path: str | None) -> tuple[Experiment, HarnessConfig]:
    """The model at ``path`` (a run or a model folder) and how its requests are scored, for lm-eval's own command line
    (``--model ladd``)."""
    from registry.engine.loading import load_trained
    from registry.host.registry import load

    if not path:
        raise LaddError("the ladd lm-eval model needs pretrained=RUN_OR_MODEL_FOLDER")
    experiment, settings = load_trained(path, load())
    return experiment, settings.harness
