"""The keyless reconciler."""
