"""Validation of a plugin's components: they import, their configs fit their factories, they build and run."""
from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ._component import Component
from ._registry import Registry
from .errors import ComponentError, IncompatibleComponentsError, MissingResourceError

#: The keyword context the core passes to each kind's factory (see docs/plugins.md).
CONTEXT: dict[str, tuple[str, ...]] = {
    "process": ("schedule", "vocab_size"),
    "latent": ("schedule",),
    "encoder": ("vocab_size", "seq_len", "tokenizer"),
    "backbone": ("channels",),
    "metric": ("tokenizer",),
}
VOCAB, SEQ, BATCH = 5, 8, 3


def check_plugin(name: str, registry: Registry) -> list[str]:
    """Problems found in plugin ``name`` (an empty list means it passed)."""
    for failure in registry.failures:
        if failure.plugin == name:
            return [f"plugin {name!r} failed to load: {failure.error}"]
    for blocked in registry.blocked:
        if blocked.plugin == name:
            return [f"plugin {name!r} is {blocked.error}"]
    mine = [c for c in registry if c.origin.plugin == name]
    if not mine:
        loaded = sorted({c.origin.plugin for c in registry})
        return [f"plugin {name!r} registers no components (loaded plugins: {', '.join(loaded)})"]
    problems = []
    for component in mine:
        label = f"{component.kind} {component.name!r}"
        try:
            factory = component.factory()
        except ComponentError as error:
            problems.append(f"{label}: {error.problem}")
            continue
        signature_problem = _signature_problem(component, factory)
        if signature_problem:
            problems.append(f"{label}: {signature_problem}")
            continue
        try:
            _exercise(component, registry)
        except MissingResourceError as error:
            # The defaults name a download (a pretrained model, a corpus): the plugin is fine, this machine lacks it.
            warnings.warn(f"{label}: not exercised: {error}", stacklevel=2)
        except Exception as error:
            problems.append(f"{label}: fails when built and run at a tiny size: {type(error).__name__}: {error}")
    return problems


def _signature_problem(component: Component, factory: Callable[..., Any]) -> str | None:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        keywords: set[str] | None = None
    else:
        keywords = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty and p.name not in CONTEXT.get(component.kind, ())]
    config = component.spec.config
    if config is not None and not positional:
        return f"has config {config.__name__} but its factory takes no positional config argument"
    if config is None and required:
        return f"has no config but its factory requires {', '.join(p.name for p in required)}"
    if config is not None and len(required) > 1:
        return f"its factory requires {', '.join(p.name for p in required)}; only the config is passed positionally"
    if config is not None:
        try:
            config()
        except TypeError as error:
            return f"config {config.__name__} cannot be built from its defaults ({error}); every field needs a default"
    missing = [k for k in CONTEXT.get(component.kind, ()) if keywords is not None and k not in keywords]
    if missing:
        return f"its factory does not accept the keyword(s) {', '.join(missing)} that ladd passes to every {component.kind}"
    return None


def _any(registry: Registry, kind: str, **context: Any) -> Any:
    """A default instance of the first registered component of ``kind`` that builds."""
    for name in registry.names(kind):
        try:
            return registry.build(kind, name, **context)
        except Exception:
            continue
    raise LookupError(f"no registered {kind} builds with defaults, so this component cannot be exercised")


def _latents(registry: Registry) -> Iterator[Any]:
    schedule = _any(registry, "schedule")
    for name in registry.names("latent"):
        try:
            latent = registry.build("latent", name, schedule=schedule)
        except Exception:
            continue
        if latent.length > 0:
            yield latent


def _exercise(component: Component, registry: Registry) -> None:
    """Build with default options and a tiny context, then make one call through the kind's interface."""
    import torch

    from .interfaces import Channels

    kind, build = component.kind, component.build
    tau = torch.tensor([0.0, 0.5, 1.0])
    if kind == "schedule":
        signal = build().signal(tau)
        assert signal.shape == tau.shape and bool(((signal >= 0) & (signal <= 1)).all()), f"signal(tau) = {signal}"
    elif kind == "process":
        process = build(schedule=_any(registry, "schedule"), vocab_size=VOCAB)
        x0 = torch.randint(VOCAB, (BATCH, SEQ))
        x_t = process.corrupt(x0, tau)
        assert process.loss(torch.randn(BATCH, SEQ, VOCAB), x0, x_t, tau).shape == (BATCH,), "loss must be per sample"
    elif kind == "latent":
        latent = build(schedule=_any(registry, "schedule"))
        if latent.length > 0:
            code = latent.encode(torch.nn.functional.normalize(torch.randn(BATCH, latent.length, latent.width), dim=-1))
            assert code.y0.shape[0] == BATCH, "encode must keep the batch"
    elif kind == "encoder":
        features = _without_text(build, vocab_size=VOCAB, seq_len=SEQ)(torch.randint(VOCAB, (BATCH, SEQ)))
        assert features.dim() == 3 and features.shape[0] == BATCH, f"features of shape {tuple(features.shape)}"
    elif kind == "backbone":
        _exercise_backbone(build, registry, Channels)
    elif kind == "dataset":
        dataset = build()
        batch = next(dataset.batches(BATCH, 0))
        assert tuple(batch.shape) == (BATCH, dataset.seq_len), f"batch of shape {tuple(batch.shape)}"
        assert batch.dtype == torch.long, f"batch of dtype {batch.dtype}"
    elif kind == "metric":
        metric = _without_text(build)
        scores = metric(torch.randint(2, (16, SEQ)), torch.randint(2, (16, SEQ)))
        assert isinstance(scores, dict) and metric.primary in scores, f"scores {scores} lack primary {metric.primary!r}"
        assert all(isinstance(v, float) for v in scores.values()), f"scores must be floats: {scores}"
    elif kind == "sampler":
        build()


def _without_text(build: Callable[..., Any], **context: Any) -> Any:
    """Build with no tokenizer; a component that needs text data is then not exercised, not broken."""
    try:
        return build(tokenizer=None, **context)
    except IncompatibleComponentsError as error:
        raise MissingResourceError(f"needs a text dataset's tokenizer, which a tiny check cannot supply ({error})") from None


def _exercise_backbone(build: Callable[..., Any], registry: Registry, channels_type: type) -> None:
    import torch

    tau = torch.full((BATCH,), 0.5)
    tokens = torch.randint(VOCAB + 1, (BATCH, SEQ))
    try:
        out = build(channels=channels_type(VOCAB, SEQ, None))(tokens, tau, None, None)
        assert out.tokens.shape == (BATCH, SEQ, VOCAB), f"token logits of shape {tuple(out.tokens.shape)}"
        return
    except IncompatibleComponentsError:
        pass
    for latent in _latents(registry):
        y = latent.backbone_input(latent.sample_prior(BATCH, torch.device("cpu")))
        for channels, x in ((channels_type(VOCAB, SEQ, latent), tokens), (channels_type(0, 0, latent), None)):
            try:
                out = build(channels=channels)(x, tau if x is not None else None, y, tau)
            except IncompatibleComponentsError:
                continue
            assert out.latent is not None, "a backbone given a latent channel must predict it"
            return
    raise IncompatibleComponentsError("builds for no channel combination (tokens, tokens + latent, latent alone)")

