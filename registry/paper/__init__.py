"""The paper's tools: FLOPs per step, matched-compute tables, result tables and plots, zero-shot perplexity."""
