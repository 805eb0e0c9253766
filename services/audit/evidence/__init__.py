"""Evidence exports: the archive, its format, export and the offline verifier."""
