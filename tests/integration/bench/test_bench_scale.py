"""``oml bench scale`` at tiny sizes: every curve runs end to end on real components; no timing is asserted."""
from __future__ import annotations

import math

import pytest

from oml_tools.bench import scale


def test_slope_is_the_log_log_least_squares_fit():
    xs = [10, 100, 1000]
    assert scale.slope(xs, [3 * x ** 0.5 for x in xs]) == pytest.approx(0.5)
    assert scale.slope(xs, [7.0, 7.0, 7.0]) == pytest.approx(0.0)
    assert scale.slope([10], [1.0]) is None
    assert scale.slope([10, 100], [0.0, 1.0]) is None  # a non-positive value is skipped, leaving one point
    assert math.isclose(scale.slope([1, 10, 100], [1, 10, 100]), 1.0)


def test_every_curve_runs_at_tiny_sizes(ctx):
    res = scale.run(ctx, sizes=(60, 120), journalled=(8, 16), tenants=(1, 2), bulk_total=40, journal_total=8,
                    admit_n=6, queries=5, base_texts=30, narrow=(10,))
    assert [r["claims"] for r in res["by_size"]] == [60, 120]  # the narrow workarea counts in the tenant's size
    assert [r["claims"] for r in res["by_journal"]] == [8, 16]
    assert [r["tenants"] for r in res["by_tenants"]] == [1, 2]
    for r in res["by_size"] + res["by_tenants"]:
        assert set(r["recall"]) == {"fts", "vector", "hybrid"}
    # Reconcile ran on a real journal and came out clean (measure raises otherwise): every submission is an event.
    assert all(r["events"] > r["claims"] for r in res["by_journal"])
    assert set(res["slopes"]["by_journal"]) == {"reconcile s", "export s"}
    # The verified state is brought over what the bulk load appended before admission is timed, on its own column;
    # a restart (the state forgotten) verifies again, every event without a snapshot at these sizes.
    assert all(r["first_verify"]["events"] > 0 and r["restart_verify"]["events"] > 0 for r in res["by_size"])
    assert all("first_verify" in r for r in res["by_tenants"])
    # The narrow reader's vector leg filtered the tenant down to its 10 claims: an exact search, every question.
    assert all(r["narrow"][10]["hybrid"]["vector_search"] == {"exact": 5} for r in res["by_size"])
    assert set(res["slopes"]["by_size_narrow"][10]) == set(res["slopes"]["by_size"]) - {"admission claims/s", "index build s"}
    lines = scale.render(res)
    assert any("first verify" in line for line in lines)
    assert any("a workarea of 10 claims" in line for line in lines)
    # The build's memory holds the graph at these sizes: pgvector never reported a spill.
    assert all(r["build"]["memory"] == "512MB" and r["build"]["spilled_after"] is None for r in res["by_size"])
    assert any("log-log slope over tenant count" in line for line in lines)


@pytest.mark.parametrize("text, says", [("0", "at least 1"), ("-5", "at least 1"), ("x", "integers"),
                                        ("200,200", "at most once")])
def test_a_bad_narrow_size_is_refused(text, says):
    import typer

    with pytest.raises(typer.BadParameter, match=says):
        scale._ints(text, "--narrow", distinct=True)
    assert scale._ints("1000, 20000", "--narrow", distinct=True) == [1000, 20000]
