"""oml-server: the read side. The only workload that unwraps DEKs and decrypts bodies (docs/design.md §Bodies and keys)."""
