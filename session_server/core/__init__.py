"""The pure core: values, codec, context, turns, tokens, validation, errors (no I/O)."""
