"""CLI: bench commands. Each benchmark lives in ``tools/oml_tools/bench/<name>.py`` and registers itself here."""
import typer

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: each prints what it measured and on what machine.")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    from oml_tools.bench import admission

    admission.register(bench_app)
    from oml_tools.bench import index, lake

    lake.register(bench_app)
    index.register(bench_app)
    from oml_tools.bench import locomo
    from oml_tools.bench import recall as recall_bench

    recall_bench.register(bench_app)
    locomo.register(bench_app)
    from oml_tools.bench import locomo_legs

    locomo_legs.register(bench_app)
    from oml_tools.bench import reconcile as reconcile_bench

    reconcile_bench.register(bench_app)
    from oml_tools.bench import hnsw_build, scale

    scale.register(bench_app)
    hnsw_build.register(bench_app)
    from oml_tools.bench import ingest

    ingest.register(bench_app)
    from oml_tools.bench import embed

    embed.register(bench_app)
    from oml_tools.bench import pii_fp

    pii_fp.register(bench_app)
    app.add_typer(bench_app, name="bench")
