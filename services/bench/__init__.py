"""Benchmarks: each module exposes ``run(...) -> dict`` and ``register(bench_app)``; numbers in docs come from here."""
