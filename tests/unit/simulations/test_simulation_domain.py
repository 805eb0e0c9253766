"""Pure simulation rules (domain/simulation.py): taint, version numbers, overlay tips, refusals."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oml.domain import claims as rules
from oml.domain import simulation as S
from oml.domain.errors import OMLError

A = "11111111-1111-1111-1111-111111111111"
B = "22222222-2222-2222-2222-222222222222"


def test_taint_comes_from_any_source_and_never_mixes():
    assert S.taint_of(explicit=None) is None
    assert S.taint_of(explicit=A) == A
    assert S.taint_of(explicit=None, claim_simulation=A) == A
    assert S.taint_of(explicit=None, supersedes_simulation=A) == A
    assert S.taint_of(explicit=None, derived_simulations=[None, A, None]) == A
    assert S.taint_of(explicit=A, derived_simulations=[A], claim_simulation=A) == A
    for kw in ({"explicit": A, "derived_simulations": [B]}, {"explicit": None, "claim_simulation": A, "supersedes_simulation": B}):
        with pytest.raises(OMLError) as e:
            S.taint_of(**kw)
        assert e.value.code == "simulation.mixed" and e.value.status == 422


versions = st.lists(st.tuples(st.booleans(), st.sampled_from([A, B])), max_size=12)


@given(versions)
def test_the_real_counter_never_sees_a_simulation(history):
    """Appending versions in any interleaving: the real numbers are 1..n whatever the simulations did."""
    existing: list[tuple[int, bool, str | None]] = [(1, False, None)]
    for tainted, sim in history:
        s = sim if tainted else None
        existing.append((S.next_version_no(existing, s), tainted, s))
    real = [n for n, t, _ in existing if not t]
    assert real == list(range(1, len(real) + 1))
    for sim in (A, B):
        mine = [n for n, t, s in existing if t and s == sim]
        assert len(mine) == len(set(mine))  # unique inside the simulation's own domain
    # Stripping every simulation version leaves exactly the history a world without simulations has.
    twin: list[tuple[int, bool, str | None]] = [(1, False, None)]
    for tainted, _ in history:
        if not tainted:
            twin.append((S.next_version_no(twin, None), False, None))
    assert [(n, t) for n, t, _ in existing if not t] == [(n, t) for n, t, _ in twin]


def test_overlay_resolution():
    assert S.resolve_tip("d", []) == "d"
    t1 = S.SimTip(A, "c", "v1", 10)
    t2 = S.SimTip(B, "c", "v2", 12)
    assert S.resolve_tip("d", [t1]) == "v1"
    assert S.resolve_tip(None, [t1, t2]) == "v2"  # the most recent simulation tip wins
    assert S.overlay_winner([t2, t1]) == t2
    assert S.overlay_winner([]) is None


def test_demoting_a_simulation_tip_falls_back_inside_the_same_simulation_only():
    vs = [S.SimVersion("r1", 1, "promoted", None), S.SimVersion("a2", 2, "promoted", A),
          S.SimVersion("a3", 3, "promoted", A), S.SimVersion("b2", 2, "promoted", B), S.SimVersion("a4", 4, "held", A)]
    assert S.sim_tip_after_demotion(vs, "a3", A) == "a2"
    assert S.sim_tip_after_demotion(vs, "a2", A) == "a3"
    assert S.sim_tip_after_demotion(vs, "b2", B) is None  # the default tip shows through again
    # The default tip never falls back onto a tainted version.
    dv = [rules.VersionState("r1", 1, "promoted"), rules.VersionState("r2", 2, "promoted"),
          rules.VersionState("a3", 3, "promoted", tainted=True)]
    assert rules.tip_after_demotion(dv, "r2") == "r1"


def test_refusals():
    S.check_overlay_promotion(simulation_open=True)
    with pytest.raises(OMLError) as e:
        S.check_overlay_promotion(simulation_open=False)
    assert e.value.code == "simulation.tip_refused" and e.value.status == 409
    S.check_default_promotion(tainted=False, overlay=False)
    S.check_default_promotion(tainted=True, overlay=True)
    for tainted, overlay in ((True, False), (False, True)):
        with pytest.raises(OMLError) as e:
            S.check_default_promotion(tainted=tainted, overlay=overlay)
        assert e.value.code == "simulation.tip_refused"


def test_inputs_are_checked_without_echo():
    assert S.check_name("drill") == "drill"
    assert S.check_audience(["bbbbbbbbbbbbbbbb", "aaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaa"]) == ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]
    for bad in ("", " ", "x" * 201, "a\x00b", 3):
        with pytest.raises(OMLError) as e:
            S.check_name(bad)
        assert e.value.extra["field"] == "name"
    for bad, field in (([], "audience"), (["SECRET"], "audience[0]"), (["aaaaaaaaaaaaaaaa", 5], "audience[1]")):
        with pytest.raises(OMLError) as e:
            S.check_audience(bad)
        assert e.value.extra["field"] == field and "SECRET" not in e.value.detail


def test_partition_names_fit_postgres_identifiers():
    for table in S.SIM_INDEX_TABLES:
        name = S.partition_name(table, A)
        assert name == f"{table}_s{A.replace('-', '')}" and len(name + "_hnsw") <= 63
    with pytest.raises(ValueError):
        S.partition_name("memories_fts", A)
    with pytest.raises(ValueError):
        S.partition_name("sim_memories_fts", "x'; drop table")


def test_close_demotions_are_sorted_ids():
    assert S.close_demotions([("c2", "v9"), ("c1", "v3"), ("c1", "v3")]) == [{"claim_id": "c1", "version_id": "v3"},
                                                                           {"claim_id": "c2", "version_id": "v9"}]
