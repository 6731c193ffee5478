"""The published decoding and scoring algorithms of LLaDA, Fast-dLLM and Dream, written here from what their code does
(ML-GSAI/LLaDA ``generate.py`` and ``eval_llada.py``; NVlabs/Fast-dLLM ``llada/generate.py``: ``generate``,
``generate_with_prefix_cache``, ``generate_with_dual_cache`` with ``threshold`` and ``factor``; Dream's
``generation_utils.py``; DreamLM/Dream ``eval/eval.py``), over a network's logits of its whole output. They share no
code with ladd. Temperature 0 throughout; where their code leaves the order of equal confidences to ``torch.topk``,
these take the leftmost first.

``net(ids)`` gives the logits ``[B, L, V]`` of every position (``net(ids, cache, window)`` with Fast-dLLM's cache, as
``llada_reference.Network``); a Dream network's logits are shifted by the algorithms, as Dream's code shifts them.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def _top(confidence: Tensor, count: int) -> list[int]:
    """The ``count`` positions of highest confidence, the leftmost first among equal ones."""
    order = sorted(range(confidence.shape[0]), key=lambda q: (-float(confidence[q]), q))
    return order[:count]


def _spread(masked: Tensor, steps: int) -> list[list[int]]:
    """LLaDA's transfer counts: each row's masked count over ``steps``, the first ``count % steps`` one more."""
    return [[m // steps + (i < m % steps) for i in range(steps)] for m in masked.tolist()]


def _canvas(prompt: Tensor, gen_length: int, mask: int) -> Tensor:
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), mask, dtype=torch.long)
    x[:, : prompt.shape[1]] = prompt
    return x


def llada_generate(net: Callable, prompt: Tensor, steps: int, gen_length: int, block_length: int, mask: int) -> Tensor:
    """LLaDA's ``generate()`` with low-confidence remasking: each block's masked count spread over its steps; at each
    step the argmax of the whole output and its softmax probability (in the logits' dtype) at every masked position
    up to the block's end, the most confident committed, a proposal of the mask included (it stays masked)."""
    x, length = _canvas(prompt, gen_length, mask), prompt.shape[1]
    blocks = gen_length // block_length
    per_block = steps // blocks
    for block in range(blocks):
        end = length + (block + 1) * block_length
        counts = _spread((x[:, end - block_length : end] == mask).sum(1), per_block)
        for step in range(per_block):
            masked = x == mask
            logits = net(x)
            x0 = logits.argmax(-1)
            p = torch.softmax(logits, -1).gather(-1, x0[..., None]).squeeze(-1).double()
            p[:, end:] = -math.inf
            x0 = torch.where(masked, x0, x)
            confidence = torch.where(masked, p, -math.inf)
            for row in range(x.shape[0]):
                for q in _top(confidence[row], counts[row][step]):
                    x[row, q] = x0[row, q]
    return x


def _transfer(logits: Tensor, candidates: Tensor, x: Tensor, count: list[int] | None, threshold: float | None,
              factor: float | None) -> tuple[Tensor, Tensor]:
    """Fast-dLLM's ``get_transfer_index`` (``count``, or with ``threshold``) and ``get_transfer_index_dynamic``
    (``factor``): the proposals and the positions they are committed at."""
    x0 = logits.argmax(-1)
    p = torch.softmax(logits.double(), -1).gather(-1, x0[..., None]).squeeze(-1)
    x0 = torch.where(candidates, x0, x)
    confidence = torch.where(candidates, p, -math.inf)
    chosen = torch.zeros_like(candidates)
    for row in range(x.shape[0]):
        n = int(candidates[row].sum())
        if factor is not None:
            ordered = sorted(confidence[row][candidates[row]].tolist(), reverse=True)
            bars = [-1.0] + [1 - factor / (k + 1) for k in range(2, n + 1)]
            top = n - 1
            for top in range(n):
                if ordered[top] < bars[top]:
                    break
            take = top + 1 if top in (0, n - 1) else top
            picked = _top(confidence[row], take)
        elif threshold is not None:
            order = _top(confidence[row], n)
            picked = order[:1] + [q for q in order[1:] if float(confidence[row, q]) >= threshold]
        else:
            assert count is not None
            picked = _top(confidence[row], count[row])
        chosen[row, picked] = True
    return x0, chosen


def fast_dllm_generate(net: Callable, prompt: Tensor, steps: int, gen_length: int, block_length: int, mask: int,
                       threshold: float | None = None, factor: float | None = None, cache: str = "none") -> Tensor:
    """Fast-dLLM's ``generate`` (``cache="none"``), ``generate_with_prefix_cache`` (``"prefix"``) and
    ``generate_with_dual_cache`` (``"dual"``): each block stepped until it holds no mask (a threshold or factor ignores
    the step count); with a cache, a block's first step runs every position and fills it, the others the block (and,
    for the prefix cache, every position after it) with the block's masked positions as candidates. A step that
    changes nothing ends the block here, where Fast-dLLM's loop would repeat it forever."""
    x, length = _canvas(prompt, gen_length, mask), prompt.shape[1]
    blocks = gen_length // block_length
    per_block = steps // blocks
    for block in range(blocks):
        start = length + block * block_length
        end = start + block_length
        counts = _spread((x[:, start:end] == mask).sum(1), per_block)
        store: dict = {}
        step = 0
        while True:
            if cache == "none" or step == 0:
                window = slice(0, x.shape[1])
                logits = net(x, store if cache != "none" else None)
                candidates = x == mask
                candidates[:, end:] = False
            else:
                window = slice(start, None if cache == "prefix" else end)
                logits = net(x, store, window)
                candidates = x[:, window] == mask
                candidates[:, block_length:] = False
            adaptive = threshold is not None or factor is not None
            count = None if adaptive else [row[step] for row in counts]  # an IndexError where Fast-dLLM's is
            before = x.clone()
            x0, chosen = _transfer(logits, candidates, x[:, window], count, threshold, factor)
            part = x[:, window]
            part[chosen] = x0[chosen]
            x[:, window] = part
            step += 1
            if not bool((x[:, start:end] == mask).any()) or torch.equal(before, x):
                break
    return x


def _dream_filter(logits: Tensor, top_p: float | None, top_k: int | None) -> Tensor:
    """Dream's ``top_p_logits`` then ``top_k_logits``: the removed tokens get the dtype's lowest value."""
    lowest = torch.finfo(logits.dtype).min
    if top_p is not None and top_p < 1:
        ordered, order = torch.sort(logits, descending=True)
        remove = torch.cumsum(F.softmax(ordered, dim=-1), dim=-1) > top_p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        logits = logits.masked_fill(torch.zeros_like(remove).scatter_(-1, order, remove), lowest)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]))[0][..., -1, None]
        logits = logits.masked_fill(logits < kth, lowest)
    return logits


def dream_generate(net: Callable, prompt: Tensor, gen_length: int, steps: int, mask: int, alg: str,
                   eps: float = 1e-3, top_p: float | None = None, top_k: int | None = None) -> Tensor:
    """Dream's ``diffusion_generate`` at temperature 0 (``alg`` maskgit_plus, topk_margin or entropy): logits shifted
    by one position; on the grid ``linspace(1, eps, steps + 1)`` a step commits ``int(M (1 - s/t))`` of the ``M``
    masked positions (all at the last step), the most confident under the alg's score of the filtered distribution."""
    x = _canvas(prompt, gen_length, mask)
    timesteps = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        masked = x == mask
        logits = net(x)
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        probs = torch.softmax(_dream_filter(logits[masked], top_p, top_k), dim=-1)
        confidence, x0 = probs.max(dim=-1)
        if alg == "topk_margin":
            ordered = torch.sort(probs, dim=-1, descending=True).values
            confidence = ordered[:, 0] - ordered[:, 1]
        elif alg == "entropy":
            confidence = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
        t, s = timesteps[i], timesteps[i + 1]
        number = masked.sum() / masked.shape[0]
        count = int(number * (1 - s / t)) if i < steps - 1 else int(number)
        full = torch.full(x.shape, -math.inf)
        full[masked] = confidence
        proposals = torch.full_like(x, mask)
        proposals[masked] = x0
        for row in range(x.shape[0]):
            for q in _top(full[row], count):
                x[row, q] = proposals[row, q]
    return x


def _cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.double(), targets, reduction="none")


def llada_expected_loglikelihood(net: Callable, prefix: list[int], target: list[int], mask: int) -> float:
    """The value ``eval_llada.py``'s Monte Carlo estimator has in expectation: ``l`` of the ``L`` target tokens masked,
    ``l`` uniform on 1..L and the set uniform given ``l``, the masked cross-entropies over the whole output weighed
    ``L / l``; minus its mean, summed here over every set ``A`` with weight ``1 / (|A| C(L, |A|))``."""
    seq, length = torch.tensor([*prefix, *target]), len(target)
    total = 0.0
    for size in range(1, length + 1):
        for chosen in itertools.combinations(range(len(prefix), len(seq)), size):
            noisy = seq.clone()
            noisy[list(chosen)] = mask
            logits = net(noisy[None])[0]
            nats = float(_cross_entropy(logits[list(chosen)], seq[list(chosen)]).sum())
            total += nats / (size * math.comb(length, size))
    return -total


def llada_greedy(net: Callable, prefix: list[int], target: list[int], mask: int) -> bool:
    """``eval_llada.py``'s ``suffix_greedy_prediction``: one token a step, the argmax of the whole output at the most
    confident masked position (a proposal of the mask leaves it masked); whether the target comes out."""
    seq = torch.tensor([*prefix, *([mask] * len(target))])[None]
    for _ in range(len(target)):
        masked = seq == mask
        logits = net(seq)[masked]
        x0 = logits.argmax(-1)
        confidence = torch.softmax(logits.float(), -1).gather(-1, x0[:, None]).squeeze(-1)
        keep = _top(confidence, 1)
        proposal = torch.full_like(x0, mask)
        proposal[keep] = x0[keep]
        seq[masked] = proposal
    return seq[0, len(prefix):].tolist() == list(target)


def dream_expected_nll(net: Callable, prefix: list[int], target: list[int], mask: int, eps: float) -> float:
    """The value Dream's evaluator's Monte Carlo estimator (``nll_type="mc"``, ``log_type="ftb"``) has in
    expectation: t uniform, each target position but the last (its appended EOS) masked with chance
    ``p = (1 - eps) t + eps``, the masked cross-entropies of the shifted logits weighed ``1 / p``; summed here over
    every set ``A`` with weight ``integral over [eps, 1] of p^(|A| - 1) (1 - p)^(L - |A|) dp / (1 - eps)``."""
    from scipy.integrate import quad

    seq = torch.tensor([*prefix, *target])
    maskable = list(range(len(prefix), len(seq) - 1))
    free = len(maskable)
    total = 0.0
    for size in range(1, free + 1):
        density = lambda p, size=size: p ** (size - 1) * (1 - p) ** (free - size)  # noqa: E731
        weight = quad(density, eps, 1, epsabs=0, epsrel=1e-12)[0] / (1 - eps)
        for chosen in itertools.combinations(maskable, size):
            noisy = seq.clone()
            noisy[list(chosen)] = mask
            logits = net(noisy[None])[0]
            logits = torch.cat([logits[:1], logits[:-1]], dim=0)
            total += weight * float(_cross_entropy(logits[list(chosen)], seq[list(chosen)]).sum())
    return total
