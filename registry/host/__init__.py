"""The plugin host: component records, hooks, plugin loading, the registry, the kinds table (torch-free)."""
