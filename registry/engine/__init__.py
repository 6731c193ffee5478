"""From settings to a model and its use: assembly, the objective, run folders, loading, sampling, evaluation."""
