"""Generative perplexity of text samples under a causal LM teacher, reported with the sample entropies."""
from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from registry.errors import IncompatibleComponentsError, LaddError
from registry.interfaces import Metric

from .config import GenPPLConfig
from .detokenize import check_finished, documents
from .entropy import sample_entropies
from .teacher import Teacher

__all__ = ["GenPPLConfig", "GenerativePerplexity"]


class GenerativePerplexity(Metric):
    """``exp`` of the mean teacher NLL per teacher token, pooled over every document of every sample.

    Samples are de-tokenised with the data tokenizer; each run of tokens between data EOS ids is one
    document, scored on its own (no context across an EOS, the EOS itself not scored). Token-weighted:
    a long document counts in proportion to its teacher tokens. Entropies are on the data-token ids.
    """

    primary = "gen_ppl"
    lower_is_better = True

    def __init__(self, config: GenPPLConfig, tokenizer: Any = None) -> None:
        if tokenizer is None or getattr(tokenizer, "eos_token_id", None) is None:
            raise IncompatibleComponentsError(
                "metric gen_ppl needs a text dataset whose tokenizer has an EOS token, to turn samples back into text"
            )
        self.tokenizer = tokenizer
        self.teacher = Teacher(config)

    def __call__(self, samples: Tensor, reference: Tensor) -> dict[str, float]:
        """Gen PPL, the teacher tokens it averages over, and both entropies; ``reference`` is unused."""
        check_finished(samples, self.tokenizer)
        nll, tokens = self.teacher.score(documents(samples, self.tokenizer))
        if tokens == 0:
            raise LaddError(f"no text to score: the {samples.shape[0]} samples decode to empty documents")
        return {"gen_ppl": math.exp(nll / tokens), "teacher_tokens": float(tokens), **sample_entropies(samples)}
