"""Denoising networks: DiT for one channel, MM-DiT for tokens and latent, an MLP latent denoiser, a causal
transformer, a pretrained Hugging Face masked LM, and LLaDA's LLaMA-style bidirectional transformer."""
from __future__ import annotations

from registry import ComponentSpec
from registry.toolkit.options import TransformerConfig

from .config import DiTConfig, HFMaskedLMConfig, LLaDAConfig, MLPDenoiserConfig

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec("backbone", "dit", "ladd_plugins.backbones.dit:DiT", DiTConfig,
                  "DiT with adaLN-Zero and RoPE for one channel (tokens, or a latent alone)"),
    ComponentSpec("backbone", "mmdit", "ladd_plugins.backbones.mmdit:MMDiT", DiTConfig,
                  "MM-DiT over tokens and latent slots with modality-specific weights"),
    ComponentSpec("backbone", "mlp", "ladd_plugins.backbones.mlp:MLPDenoiser", MLPDenoiserConfig,
                  "residual MLP latent denoiser (sequential Co-LADD)"),
    ComponentSpec("backbone", "hf_masked_lm", "ladd_plugins.backbones.hf_masked_lm:HFMaskedLM", HFMaskedLMConfig,
                  "a pretrained Hugging Face masked LM (BERT, RoBERTa, ModernBERT, ...) as the untimed token denoiser"),
    ComponentSpec("backbone", "causal", "ladd_plugins.backbones.causal:CausalTransformer", TransformerConfig,
                  "causal transformer (RoPE, no time input): logits at i from tokens < i"),
    ComponentSpec("backbone", "llada", "ladd_plugins.backbones.llada:LLaDA", LLaDAConfig,
                  "LLaDA's LLaMA-style bidirectional transformer (RMSNorm, SwiGLU, RoPE), untimed; a latent joins it"),
]
