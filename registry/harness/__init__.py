"""lm-eval's harness for ladd models: importing it registers the lm-eval model ``ladd``.

It needs the optional extra ``pip install -e ".[harness]"`` (lm-eval); nothing else in ladd imports lm-eval.
"""
from __future__ import annotations

from .adapter import HarnessSettings, LaddLM

__all__ = ["HarnessSettings", "LaddLM"]
