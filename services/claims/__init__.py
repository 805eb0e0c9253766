"""Claims: admission (submit) and review."""
