"""ladd's built-in components, registered through the same hook as any third-party plugin."""
