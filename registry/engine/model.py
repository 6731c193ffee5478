"""The diffusion model assembled from components: the generic LADD objective (MDLM when there is no latent)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from registry.config.settings import Objective, StageConfig
from registry.distributed import Shard, own_noise, spread, take
from registry.errors import IncompatibleComponentsError
from registry.interfaces import (
    AttentionPattern,
    Backbone,
    CachingBackbone,
    Channels,
    Denoised,
    Encoder,
    Latent,
    LatentCode,
    Process,
    Schedule,
    TrainableModel,
    mask_id,
)

from .compute import Meter
from .timesteps import draw_independent_times, draw_times


def _where_batch(condition: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Per-sample select between two batched tensors of any trailing shape."""
    return torch.where(condition.view(-1, *([1] * (a.dim() - 1))), a, b)


def kept_row_weights(dropped: Tensor) -> Tensor:
    """Row weights whose mean over the batch is the mean over the rows not ``dropped`` (all zero if every row is).

    Computed on the global batch, so that ranks averaging their own rows' weighted means still average over all
    kept rows.
    """
    kept = (~dropped).float()
    return kept * (kept.numel() / kept.sum().clamp(min=1.0))


def real_token_weights(padding: Tensor) -> Tensor:
    """Position weights whose mean over a batch is the mean over its positions that are not ``padding``.

    Computed on the global batch, so that ranks averaging their own rows' weighted means still average over
    all the real positions (the token-weighted mean MDLM takes over the unpadded positions of a batch).
    """
    real = (~padding).float()
    return real * (real.numel() / real.sum().clamp(min=1.0))


def answer_weights(unscored: Tensor) -> Tensor:
    """Position weights whose mean over a row is the mean over that row's scored positions (those not ``unscored``).

    Each row is normalised by its own count, the answer length of instruction tuning (LLaDA's SFT divides each
    sequence's loss by it), so the batch's loss is the mean of its rows': ranks averaging their rows average to it.
    """
    scored = (~unscored).float()
    return scored * (scored.shape[1] / scored.sum(dim=1, keepdim=True).clamp(min=1.0))


def position_weights(padding: Tensor | None, context: Tensor | None) -> Tensor | None:
    """The token loss's weights of the positions: with ``context`` (``Dataset.context``), per row over the positions
    outside the context and the padding; with ``padding`` alone, over the batch's real positions; else None."""
    if context is None:
        return None if padding is None else real_token_weights(padding)
    return answer_weights(context if padding is None else context | padding)


def kept_clean(x_t: Tensor, x0: Tensor, context: Tensor | None) -> Tensor:
    """``x_t`` with the context's positions clean: a prompt is never noised."""
    return x_t if context is None else torch.where(context, x0, x_t)


def _weighted_mean(values: Tensor, weights: Tensor | None) -> Tensor:
    return values.mean() if weights is None else (values * weights).mean()


class DiffusionModel(nn.Module, TrainableModel):
    """Token process + optional latent channel (encoder, latent, its process) + denoising backbones."""

    def __init__(
        self,
        process: Process,
        latent: Latent | None,
        backbone: Backbone,
        vocab_size: int,
        seq_len: int,
        objective: Objective,
        encoder: Encoder | None = None,
        latent_backbone: Backbone | None = None,
        latent_process: Process | None = None,
        schedule: Schedule | None = None,
        eos_id: int | None = None,
    ) -> None:
        super().__init__()
        if (latent is None) != (latent_process is None):
            raise IncompatibleComponentsError("a latent channel needs both a latent and a latent process, or neither")
        self.process = process
        self.schedule = schedule
        self.latent = latent
        self.latent_process = latent_process
        self.backbone = backbone
        self.encoder = encoder
        self.latent_backbone = latent_backbone
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.eos_id = eos_id
        self.mask_column = getattr(backbone, "mask_column", None)  # the token backbone's declaration
        self.objective = objective
        self.lambda_latent = 1.0  # the weight of L^y: the full objective until a training stage sets its own
        self.encoder_frozen = False
        self.meter: Meter | None = None  # counts the backbone calls of predict while set (engine.compute.counting)
        if self.attention.block is not None:
            _check_block_training(process, latent)

    @property
    def has_latent(self) -> bool:
        return self.latent is not None

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def caches_token_predictions(self) -> bool:
        return not self.backbone.token_time_conditioned

    @property
    def attention(self) -> AttentionPattern:
        return getattr(self.backbone, "attention", AttentionPattern())

    def begin_stage(self, stage: StageConfig) -> None:
        """Train as ``stage`` says: its weight of the latent loss, and a frozen encoder once a stage freezes it."""
        self.lambda_latent = stage.lambda_latent
        if stage.freeze_encoder:
            self.freeze_encoder()

    def freeze_encoder(self) -> None:
        """Stage 2: the encoder stops learning; the latent's own state keeps training (a VQ's codebook, mask vector).

        The paper freezes the encoder and optimises the full objective, quantiser loss included; the authors'
        code freezes the encoder module alone and keeps the quantiser (EMA codebook, learned mask vector) training.
        """
        self.encoder_frozen = True
        if self.encoder is not None:
            self.encoder.requires_grad_(False)
            self.encoder.eval()

    def compile_backbones(self, mode: str | None = None) -> None:
        """``torch.compile`` the denoising backbones in place: parameter names, the EMA and checkpoints are
        unchanged."""
        for backbone in (self.backbone, self.latent_backbone):
            if backbone is not None:
                backbone.compile(mode=mode)

    def train(self, mode: bool = True) -> DiffusionModel:
        super().train(mode)
        if self.encoder_frozen and self.encoder is not None:
            self.encoder.eval()
        return self

    def predict(
        self,
        x_t: Tensor | None,
        tau_x: Tensor | None,
        y_t: Tensor | None,
        tau_y: Tensor | None,
        rows: Tensor | None = None,
        cache: Any = None,
        window: slice | None = None,
    ) -> Denoised:
        y_in = None if y_t is None else self.latent_channel()[0].backbone_input(y_t)
        if tau_x is not None:
            self._spend(self.backbone, self._channels(), x_t, window, rows)
            if cache is None:
                return self.backbone(x_t, tau_x, y_in, tau_y, rows)
            return self.backbone(x_t, tau_x, y_in, tau_y, rows, cache=cache, window=window)
        if self.latent_backbone is not None:
            self._spend(self.latent_backbone, Channels(0, 0, self.latent), y_in, None, None)
            return Denoised(latent=self.latent_backbone(None, None, y_in, tau_y).latent)
        if y_t is None or tau_y is None:
            raise ValueError(
                "a prediction of the latent alone (tau_x None) needs the noisy latent y_t and its time tau_y"
            )
        if x_t is None:
            x_t = torch.full(
                (y_t.shape[0], self.seq_len), mask_id(self.vocab_size), dtype=torch.long, device=y_t.device
            )
        self._spend(self.backbone, self._channels(), x_t, None, None)
        return Denoised(latent=self.backbone(x_t, torch.ones_like(tau_y), y_in, tau_y).latent)

    def _channels(self) -> Channels:
        """What the token backbone denoises."""
        return Channels(self.vocab_size, self.seq_len, self.latent)

    def _spend(
        self, backbone: Backbone, channels: Channels, inputs: Tensor | None, window: slice | None, rows: Tensor | None
    ) -> None:
        """Charge a backbone call to the meter, when one counts."""
        if self.meter is not None and inputs is not None:
            tokens = inputs.shape[1] if channels.tokens else None
            self.meter.spend(backbone, channels, inputs.shape[0], window, rows, tokens)

    def new_cache(self, batch: int) -> Any:
        """An empty key-value cache of the token backbone (a ``CachingBackbone``) for ``batch`` sequences."""
        if not isinstance(self.backbone, CachingBackbone):
            raise IncompatibleComponentsError(
                f"backbone {type(self.backbone).__name__} keeps no key-value cache (it is no "
                f"registry.interfaces.CachingBackbone): sample without a cache"
            )
        return self.backbone.new_cache(batch, self.device)

    @contextmanager
    def frozen_base(self) -> Iterator[None]:
        """Predictions of the frozen base inside: every LoRA adapter (peft's) switched off, then back as it was."""
        # peft's adapted layers, found by what they offer (torch types their attributes as tensors or modules)
        adapted: list[Any] = [
            m for m in self.modules() if hasattr(m, "enable_adapters") and hasattr(m, "disable_adapters")
        ]
        if not adapted:
            raise IncompatibleComponentsError(
                "the model has no frozen base to serve as the reference: it trains without LoRA adapters; set "
                "train.lora.rank (the base under the adapters is the reference) or drop the reference's term"
            )
        was_off = [bool(m.disable_adapters) for m in adapted]
        trains = [(parameter, parameter.requires_grad) for parameter in self.parameters()]
        for module in adapted:
            module.enable_adapters(False)
        try:
            yield
        finally:
            for module, off in zip(adapted, was_off, strict=True):
                module.enable_adapters(not off)
            for parameter, requires in trains:  # peft's switch also sets which adapters train: as the stage set them
                parameter.requires_grad_(requires)

    @torch.no_grad()
    def encode(self, x0: Tensor) -> Tensor:
        """The clean latent ``y0`` of each sequence of ``x0`` ``[B, S]``: the latent's ``mode`` of encoder features.

        Computed in eval mode (no dropout, no codebook update) whatever mode the model is in, so the same model
        and sequences give the same latents; a latent that draws anyway draws from a stream of fixed seed.
        """
        latent, encoder = self.latent_channel()[0], self._encoder()
        device, training = self.device, self.training
        self.eval()
        try:
            with own_noise(None, device, torch.Generator(device=device).manual_seed(0)):
                return latent.mode(encoder(x0.to(device)))
        finally:
            self.train(training)

    def _encoder(self) -> Encoder:
        """The encoder a latent channel reads the clean tokens with (assembly requires one with every latent)."""
        if self.encoder is None:
            raise IncompatibleComponentsError("a latent channel needs an encoder: set encoder=NAME")
        return self.encoder

    def loss(
        self,
        x0: Tensor,
        generator: torch.Generator | None = None,
        shard: Shard | None = None,
        padding: Tensor | None = None,
        context: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """The training objective and its terms (batch means).

        With ``shard``, ``x0`` is the global batch: every random draw is made at its shape and only the
        shard's rows go through the networks, so the ranks' mean gradient is the one-process gradient.
        ``padding`` (bool, the shape of ``x0``) marks positions that only pad a row: they are noised and
        seen as usual but kept out of the token loss, which averages over the batch's real positions.
        ``context`` (bool, the shape of ``x0``) marks positions that only condition the rest (a prompt): they stay
        clean and unscored, and the token loss averages each row over its other positions, then over the rows.
        """
        batch, device = x0.shape[0], x0.device
        objective = self.objective
        tau_all = self._token_times(batch, generator, device, objective.time_min, objective.time_max)
        x_t = take(shard, kept_clean(self.process.corrupt(x0, tau_all, generator), x0, context))
        x0, tau_x = take(shard, x0), take(shard, tau_all)
        weights = position_weights(padding, context)
        positions = None if weights is None else take(shard, weights)
        if not self.has_latent:
            with own_noise(shard, device, generator):
                token = self._token_loss(x0, x_t, tau_x, None, None, positions)[0].mean()
            return {"loss": token, "token": token}

        encoder, latent = self._encoder(), self.latent_channel()[0]
        # p_r follows the model's mode, not the encoder's: a frozen encoder (Stage 2, a pretrained one) still blanks
        masked = x_t == mask_id(self.vocab_size) if self.training else None
        with own_noise(shard, device, generator):
            code = latent.encode(encoder(x0, masked))
        y0, target, weights, dropped = code.y0, code.y0, None, None
        if self.training and self.objective.p_cfg > 0:
            dropped_all = torch.rand(batch, generator=generator, device=device) < self.objective.p_cfg
            dropped = take(shard, dropped_all)
            y0 = _where_batch(dropped, latent.null(y0.shape[0], device).to(y0.dtype), y0)
            if self.objective.latent_loss_on_dropped:
                target = y0
            else:
                weights = take(shard, kept_row_weights(dropped_all))
        tau_y, y_t = self._token_side_latent(y0, tau_all, generator, shard)
        if dropped is not None and not latent.noised_null:
            y_t = _where_batch(dropped, latent.null(y_t.shape[0], device).to(y_t.dtype), y_t)
        with own_noise(shard, device, generator):
            y_in = latent.backbone_input(y_t, code)
            token, latent_prediction = self._token_loss(x0, x_t, tau_x, y_in, tau_y, positions)
        terms = {"token": token.mean()}
        total = terms["token"]
        if self.lambda_latent > 0:
            terms["latent"] = self._latent_loss(target, weights, y_t, tau_y, latent_prediction, code, generator, shard)
            total = total + self.lambda_latent * terms["latent"]
        if code.aux_loss is not None and code.aux_loss.requires_grad:
            terms["aux"] = code.aux_loss
            total = total + code.aux_loss
        terms["loss"] = total
        return terms

    def token_loss(
        self,
        x0: Tensor,
        clean_latent: bool,
        generator: torch.Generator | None = None,
        padding: Tensor | None = None,
        context: Tensor | None = None,
    ) -> Tensor:
        """Per-sample token loss L^x, conditioning on the noisy latent (joint) or on the clean one (sequential).

        With ``padding``, a row's value counts its real positions only, weighted so that the batch mean is the
        mean over the batch's real positions. With ``context``, those positions stay clean and unscored and a
        row's value is its mean over its other positions.
        """
        batch, device = x0.shape[0], x0.device
        tau_x = self._token_times(batch, generator, device)
        x_t = kept_clean(self.process.corrupt(x0, tau_x, generator), x0, context)
        y_in, tau_y = None, None
        if self.has_latent:
            encoder, (latent, latent_process) = self._encoder(), self.latent_channel()
            with own_noise(None, device, generator):
                y0 = latent.encode(encoder(x0)).y0
            if clean_latent:
                tau_y, y_t = torch.zeros_like(tau_x), y0
            else:
                tau_y, y_t = tau_x, latent_process.corrupt(y0, tau_x, generator)
            y_in = latent.backbone_input(y_t)
        with own_noise(None, device, generator):
            return self._token_loss(x0, x_t, tau_x, y_in, tau_y, position_weights(padding, context))[0]

    def _token_loss(
        self,
        x0: Tensor,
        x_t: Tensor,
        tau_x: Tensor,
        y_in: Tensor | None,
        tau_y: Tensor | None,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Per-sample token loss and the backbone's latent prediction (the head applied at the loss rows only if asked).

        ``positions``: weights of the positions (0 at padding and context); None, every position alike
        (``Process.loss``).
        """
        rows = self.process.loss_rows(x_t) if self.objective.head_on_loss_rows else None
        if self.attention.block is None:
            out = self.backbone(x_t, tau_x, y_in, tau_y, rows)
        else:  # each noisy block given the clean blocks before it
            out = self.backbone(x_t, tau_x, y_in, tau_y, rows, context=x0)
        if positions is None:
            return self.process.loss(out.tokens, x0, x_t, tau_x), out.latent
        return (self.process.position_loss(out.tokens, x0, x_t, tau_x) * positions).mean(dim=1), out.latent

    def _token_times(
        self, batch: int, generator: torch.Generator | None, device: torch.device, low: float = 0.0, high: float = 1.0
    ) -> Tensor:
        """Token times within ``[low, high]``: one per sequence ``[B]``, or, for a backbone of block attention, one per
        block ``[B, S]`` (every position of a block at its block's time; all blocks of the batch stratified together).
        """
        block = self.attention.block
        if block is None:
            return draw_times(batch, self.process.horizon, generator, device, low, high)
        blocks = -(-self.seq_len // block)
        tau = draw_times(batch * blocks, self.process.horizon, generator, device, low, high).view(batch, blocks)
        return tau.repeat_interleave(block, dim=1)[:, : self.seq_len]

    def _token_side_latent(
        self, y0: Tensor, tau_all: Tensor, generator: torch.Generator | None, shard: Shard | None
    ) -> tuple[Tensor, Tensor]:
        mode = self.objective.latent_time
        if mode == "clean":
            return take(shard, torch.zeros_like(tau_all)), y0
        latent_process = self.latent_channel()[1]
        if mode == "tied":
            tau_y = tau_all
        else:
            tau_y = draw_independent_times(tau_all.shape[0], latent_process.horizon, generator, tau_all.device)
        return take(shard, tau_y), take(shard, latent_process.corrupt(spread(shard, y0), tau_y, generator))

    def _latent_loss(
        self,
        y0: Tensor,
        weights: Tensor | None,
        y_t: Tensor,
        tau_y: Tensor,
        prediction: Tensor | None,
        code: LatentCode,
        generator: torch.Generator | None,
        shard: Shard | None,
    ) -> Tensor:
        """The latent term: the latent's per-row loss, averaged with ``weights`` per row (None: equal weights).

        ``prediction`` is the token backbone's latent prediction, used when there is no separate latent backbone.
        """
        latent, latent_process = self.latent_channel()
        if self.latent_backbone is None:
            if prediction is None:
                raise IncompatibleComponentsError(
                    f"backbone {type(self.backbone).__name__} predicts no latent and there is no latent_backbone"
                )
            return _weighted_mean(latent_process.loss(prediction, y0, y_t, tau_y), weights)
        repeats = self.objective.latent_repeats
        y0 = y0.repeat_interleave(repeats, dim=0)
        if code.embedding is not None:
            code = LatentCode(code.y0, code.aux_loss, code.embedding.repeat_interleave(repeats, dim=0))
        y_all = spread(shard, y0, repeats)
        tau_all = draw_times(y_all.shape[0], latent_process.horizon, generator, y0.device)
        y_noisy = take(shard, latent_process.corrupt(y_all, tau_all, generator), repeats)
        tau = take(shard, tau_all, repeats)
        with own_noise(shard, y0.device, generator):
            prediction = self.latent_backbone(None, None, latent.backbone_input(y_noisy, code), tau).latent
        if weights is not None:
            weights = weights.repeat_interleave(repeats, dim=0)
        return _weighted_mean(latent_process.loss(prediction, y0, y_noisy, tau), weights)


def _check_block_training(process: Process, latent: Latent | None) -> None:
    """Refuse what a backbone of block attention cannot be trained with: a process without a time per position, or
    a latent channel (whose time would have to follow a time per block)."""
    if not process.position_times:
        raise IncompatibleComponentsError(
            f"a backbone of block attention trains every block at its own time, but token process "
            f"{type(process).__name__} takes one time per sequence (it declares no position_times); choose a process "
            f"that declares position_times"
        )
    if latent is not None:
        raise IncompatibleComponentsError(
            "a backbone of block attention trains every block at its own time, which a latent channel's time cannot "
            "follow; set latent=null"
        )
