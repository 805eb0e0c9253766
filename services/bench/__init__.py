"""Benchmarks: each module exposes ``run(...) -> dict`` and ``register(bench_app)``; numbers in docs come from here."""


def rate(n: int, seconds: float) -> float:
    """Items per second; infinite when the clock measured no time."""
    return n / seconds if seconds > 0 else float("inf")
