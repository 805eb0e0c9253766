"""Erasure: erasure acts and the shred, holds, the erasure report and restore."""
