"""oml-server: the read side. The only workload that unwraps DEKs and decrypts bodies (DESIGN.md, Bodies and keys)."""
