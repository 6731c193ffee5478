"""What `ladd plugins check` runs: validation of a plugin and one tiny real use per kind."""
