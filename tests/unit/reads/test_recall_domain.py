"""Pure read-path rules: the visibility predicate, steering order, RRF, budgets, tsquery text, read-log digests."""
from __future__ import annotations

import datetime as dt
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oml.domain import readlog as rl
from oml.domain import recall as R
from oml.domain.access import Principal
from oml.domain.errors import OMLError

from support.paths import REPO

T = "acme"
ME = "11111111-1111-1111-1111-111111111111"
OTHER = "22222222-2222-2222-2222-222222222222"
SIM = "33333333-3333-3333-3333-333333333333"


def principal(*roots: str, role: str = "reader", identity: str = ME) -> Principal:
    return Principal(T, "k1", identity, role, tuple(f"n{i}" for i in range(len(roots))), tuple(roots))


def row(path: str = "main.eng", **kw) -> R.RowFacts:
    base = dict(tenant=T, claim_id="c1", version_id="v1", path=path, kind="fact", provenance="observed",
                status="promoted", self_signed=False, tainted=False, simulation_id=None, author_identity=OTHER,
                is_tip=True, claim_erased=False)
    base.update(kw)
    return R.RowFacts(**base)


def read(p: Principal, *scopes: str, mode: str = "tip", audience=frozenset()) -> R.ReadScope:
    return R.ReadScope(p, tuple(scopes) or p.root_paths, mode, frozenset(audience))


# ---------------------------------------------------------------- the predicate

def test_promoted_tip_inside_scope_is_visible():
    p = principal("main.eng")
    assert R.visible(row("main.eng.search"), read(p), "hit")
    assert R.visible(row("main.eng"), read(p), "hit")


@pytest.mark.parametrize("status", ["held", "rejected", "demoted", "erased"])
def test_only_promoted_versions_are_served(status):
    p = principal("main")
    assert not R.visible(row(status=status), read(p), "hit")
    assert not R.visible(row(status=status), read(p, mode="history"), "item")


def test_erased_claim_never_served():
    p = principal("main")
    assert not R.visible(row(claim_erased=True), read(p), "hit")
    assert not R.visible(row(claim_erased=True), read(p, mode="history"), "item")


def test_tip_mode_requires_tip_history_does_not():
    p = principal("main")
    assert not R.visible(row(is_tip=False), read(p), "hit")
    assert R.visible(row(is_tip=False), read(p, mode="history"), "item")


def test_other_tenant_never():
    p = principal("main")
    assert not R.visible(row(tenant="other"), read(p), "hit")


def test_outside_access_and_outside_scope():
    p = principal("main.eng")
    assert not R.visible(row("main.sales"), read(p), "hit")
    assert not R.visible(row("main.engineering"), read(p), "hit")  # a prefix is not an ancestor
    # Scoped to a sub-workarea: siblings inside access are out of scope.
    assert not R.visible(row("main.eng.ops"), read(p, "main.eng.search"), "hit")


def test_ancestor_steering_applies_above_roots_ancestor_facts_do_not():
    p = principal("main.eng.search")
    steer = row("main", kind="steering")
    fact = row("main", kind="fact")
    assert R.visible(steer, read(p), "steering")
    assert not R.visible(steer, read(p), "hit")  # segment 1, never a hit
    assert not R.visible(fact, read(p), "steering")
    assert not R.visible(fact, read(p), "hit")
    assert R.visible(steer, read(p), "item")
    assert not R.visible(fact, read(p), "item")


def test_steering_below_scope_is_not_segment_one():
    p = principal("main")
    assert not R.visible(row("main.eng", kind="steering"), read(p), "steering")
    assert R.visible(row("main.eng", kind="steering"), read(p), "hit")


def test_self_signed_only_when_scoped_within_its_workarea():
    p = principal("main")
    ss = row("main.dev", self_signed=True)
    assert not R.visible(ss, read(p), "hit")               # scoped at the root: outside main.dev
    assert R.visible(ss, read(p, "main.dev"), "hit")       # scoped at its workarea
    assert not R.visible(ss, read(p, "main.dev.sub"), "hit")  # a hit must be inside the scope
    ss_steer = row("main.dev", self_signed=True, kind="steering")
    assert R.visible(ss_steer, read(p, "main.dev.sub"), "steering")  # scope lies within its workarea
    assert not R.visible(ss_steer, read(p, "main.other"), "steering")


def test_held_rows_only_to_their_author_through_own_work():
    me = principal("main", role="writer")
    mine = row(status="held", author_identity=ME)
    theirs = row(status="held", author_identity=OTHER)
    assert R.visible(mine, read(me, mode="own_work"), "item")
    assert not R.visible(theirs, read(me, mode="own_work"), "item")
    assert not R.visible(mine, read(me), "hit")
    assert not R.visible(row(status="promoted", author_identity=ME), read(me, mode="own_work"), "item")


@pytest.mark.parametrize("kw", [dict(provenance="simulation", simulation_id=SIM), dict(tainted=True, simulation_id=SIM),
                                dict(simulation_id=SIM), dict(tainted=True), dict(provenance="simulation")])
def test_simulation_rows_never_outside_audience(kw):
    p = principal("main")
    r = row(**kw)
    for mode, seg in (("tip", "hit"), ("tip", "steering"), ("history", "item")):
        assert not R.visible(r, read(p, mode=mode), seg)
    if r.simulation_id:
        assert R.visible(r, read(p, mode="tip", audience={SIM}), "hit")
    else:
        assert not R.visible(r, read(p, audience={SIM}), "hit")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["main", "main.a", "main.a.b", "main.c", "other"]),
       st.sampled_from(["main", "main.a", "main.a.b", "main.c"]),
       st.sampled_from(["fact", "steering"]), st.sampled_from(["held", "promoted", "demoted", "rejected"]),
       st.booleans(), st.booleans(), st.booleans(), st.sampled_from(["hit", "steering", "item"]))
def test_predicate_never_admits_forbidden_rows(path, root, kind, status, ss, tainted, erased, segment):
    p = principal(root)
    r = row(path, kind=kind, status=status, self_signed=ss, tainted=tainted, claim_erased=erased)
    ok = R.visible(r, read(p), segment)
    if ok:
        assert status == "promoted" and not tainted and not erased
        if segment == "hit":
            assert p.can_access(path)
        if not p.can_access(path):
            assert kind == "steering"


# ---------------------------------------------------------------- scope and steering order

def test_resolve_scope():
    p = principal("main.eng", "main.ops")
    assert R.resolve_scope(p, None) == ("main.eng", "main.ops")
    assert R.resolve_scope(p, "main.eng.x") == ("main.eng.x",)
    with pytest.raises(OMLError) as e:
        R.resolve_scope(p, "main")
    assert e.value.code == "workarea.not_found"


def test_steering_paths_and_order():
    assert R.steering_paths(["a.b.c", "a.d"]) == ["a", "a.b", "a.b.c", "a.d"]
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    items = [("a.b", t0, "c2", "v2"), ("a", t0 + dt.timedelta(1), "c3", "v3"), ("a", t0, "c9", "v9"), ("a", t0, "c1", "v1")]
    ordered = sorted(items, key=lambda x: R.steering_order_key(*x))
    assert [x[2] for x in ordered] == ["c1", "c9", "c3", "c2"]


# ---------------------------------------------------------------- fusion

def test_rrf_constant_and_scores():
    assert R.RRF_K == 10 and R.RRF_K_CLASSIC == 60
    fused = R.fuse_rrf({"fts": ["a", "b", "c"], "vector": ["b", "d"]}, k=60)
    score = {x.key: x.score for x in fused}
    assert score["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert score["a"] == pytest.approx(1 / 61)
    assert [x.key for x in fused][0] == "b"
    assert fused[0].ranks == {"fts": 2, "vector": 1}
    default = {x.key: x.score for x in R.fuse_rrf({"fts": ["a", "b"], "vector": ["b"]})}
    assert default["b"] == pytest.approx(1 / 12 + 1 / 11)


def test_rrf_ties_are_deterministic_and_never_fall_to_the_key():
    # a and x have identical scores (rank 1 in one leg each): the legs' priority breaks the tie (fts first),
    # whatever the input order and whatever the keys (random version ids in production).
    outs = set()
    for legs in ({"fts": ["x", "b"], "vector": ["a", "c"]}, {"vector": ["a", "c"], "fts": ["x", "b"]}):
        outs.add(tuple(x.key for x in R.fuse_rrf(legs)))
    assert outs == {("x", "a", "b", "c")}
    renamed = R.fuse_rrf({"fts": ["z9", "b"], "vector": ["a0", "c"]})
    assert [x.key for x in renamed] == ["z9", "a0", "b", "c"]
    # Same score, same best rank, both legs: the first leg's rank decides.
    both = R.fuse_rrf({"fts": ["p", "q", "r", "s"], "vector": ["s", "r", "q", "p"]})
    assert [x.key for x in both] == ["p", "s", "q", "r"]
    assert [x.key for x in R.fuse_rrf({"fts": ["x"], "vector": ["a"]}, priority=("vector", "fts"))] == ["a", "x"]


def test_leg_order_key_breaks_ties_by_meaning_first():
    rows = [("v-a", 0.5, (-0.1, -3)), ("v-b", 0.5, (-0.2, -1)), ("v-c", 0.5, (-0.1, -7)), ("v-d", 0.9, (0.0, 0))]
    best = sorted(rows, key=lambda r: R.leg_order_key(r[1], r[2], r[0], higher_is_better=True))
    assert [r[0] for r in best] == ["v-d", "v-b", "v-c", "v-a"]
    near = sorted(rows, key=lambda r: R.leg_order_key(r[1], r[2], r[0], higher_is_better=False))
    assert [r[0] for r in near][-1] == "v-d"
    assert R.leg_order_key(0.5, (), "k2", higher_is_better=True) > R.leg_order_key(0.5, (), "k1", higher_is_better=True)


def test_valid_state_is_half_open():
    t = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
    day = dt.timedelta(days=1)
    assert R.valid_state(None, None, t) == "valid"
    assert R.valid_state(t, None, t) == "valid"              # from is inclusive
    assert R.valid_state(None, t, t) == "expired"            # to is exclusive
    assert R.valid_state(t - day, t + day, t) == "valid"
    assert R.valid_state(t + day, None, t) == "not_yet_valid"
    assert R.valid_state(None, t - day, t) == "expired"
    assert R.VALID_STATES == ("valid", "expired", "not_yet_valid")


def test_rrf_ignores_duplicates_and_weights():
    fused = R.fuse_rrf({"fts": ["a", "a", "b"]})
    assert [x.ranks for x in fused] == [{"fts": 1}, {"fts": 2}]
    w = R.fuse_rrf({"fts": ["a"], "vector": ["b"]}, weights={"fts": 2.0})
    assert [x.key for x in w] == ["a", "b"]
    with pytest.raises(ValueError):
        R.fuse_rrf({"fts": ["a"]}, k=0)


def test_rank_single_orders_and_breaks_ties_by_key():
    r = R.rank_single("fts", ["b", "a", "c"], [0.5, 0.5, 0.9])
    assert [x.key for x in r] == ["c", "a", "b"]
    d = R.rank_single("vector", ["b", "a", "c"], [0.2, 0.2, 0.1], higher_is_better=False)
    assert [x.key for x in d] == ["c", "a", "b"]


# ---------------------------------------------------------------- budgets

def test_budget_never_drops_steering_and_keeps_a_prefix():
    b = R.Budget(k=5, max_chars=100)
    assert R.apply_budget([80], [10, 30, 5], b) == (1, 2)  # 80+10 fits, +30 does not; 5 is not skipped to
    assert R.apply_budget([500], [1, 1], b) == (0, 2)     # steering alone exceeds: all hits out, steering kept
    assert R.apply_budget([], [10] * 8, R.Budget(k=3)) == (3, 0)


def test_budget_tokens_and_validation():
    assert R.Budget(k=1, max_tokens=10).char_limit == 40
    assert R.Budget(k=1, max_tokens=10, max_chars=30).char_limit == 30
    for bad in (dict(k=0), dict(k=101), dict(k=1, max_chars=-1)):
        with pytest.raises(OMLError):
            R.Budget(**bad)


# ---------------------------------------------------------------- query text

def test_tsquery_text_quotes_every_lexeme():
    assert R.tsquery_text(["dog", "cat", "dog"], "&") == "'cat' & 'dog'"
    assert R.tsquery_text(["a|b", "it's", "x\\y", "c&!(d):*"], "|") == "'a|b' | 'c&!(d):*' | 'it''s' | 'x\\\\y'"
    assert R.tsquery_text([], "|") is None
    with pytest.raises(ValueError):
        R.tsquery_text(["a"], "<->")


def test_check_query():
    assert R.check_query("") == ""
    for bad in (None, 3, "x" * (R.QUERY_MAX_CHARS + 1), "a\x00b", "\ud800glacier", "glacier\udfff", "\udcff"):
        with pytest.raises(OMLError) as e:
            R.check_query(bad)
        assert e.value.code == "admission.invalid"
        assert "a\x00b" not in e.value.detail and "glacier" not in e.value.detail


def test_query_digest_is_keyed():
    a = R.query_digest(b"k" * 32, "where is the cat")
    assert a != R.query_digest(b"j" * 32, "where is the cat")
    assert a != R.query_digest(b"k" * 32, "where is the dog")
    assert len(a) == 32


# ---------------------------------------------------------------- read-log digests

def _read(i: int, **kw) -> rl.ReadRow:
    base = dict(tenant=T, read_id=i, at=dt.datetime(2024, 5, 1, 12, 0, i, tzinfo=dt.UTC), principal="k1",
                identity=ME, role="reader", op="recall", workarea_ids=("w1",), claim_ids=("c1", "c2"),
                query_digest=b"\x01" * 32)
    base.update(kw)
    return rl.ReadRow(**base)


def test_readlog_compare_names_edited_inserted_deleted():
    reads = [_read(i) for i in (3, 5, 9)]
    pairs = [(r.read_id, rl.leaf(r)) for r in reads]
    anchor = rl.anchor_data(1, pairs)
    members = rl.members_blob(pairs)
    stored = dict(pairs)
    assert rl.compare_batch(1, anchor, members, stored) == []
    edited = dict(stored)
    edited[5] = rl.leaf(_read(5, claim_ids=("c1",)))
    assert [f.as_dict() for f in rl.compare_batch(1, anchor, members, edited)] == [{"kind": "edited", "batch_no": 1, "read_id": 5}]
    deleted = {k: v for k, v in stored.items() if k != 9}
    assert [f.kind for f in rl.compare_batch(1, anchor, members, deleted)] == ["deleted"]
    inserted = dict(stored) | {7: rl.leaf(_read(7))}
    assert [(f.kind, f.read_id) for f in rl.compare_batch(1, anchor, members, inserted)] == [("inserted", 7)]
    forged = rl.members_blob(pairs[:2])
    kinds = [f.kind for f in rl.compare_batch(1, anchor, forged, stored)]
    assert kinds[:2] == ["members_mismatch", "anchor_mismatch"] and "inserted" in kinds
    assert [f.kind for f in rl.compare_batch(1, anchor, None, stored)][0] == "batch_missing"


def test_readlog_leaf_covers_every_field():
    base = _read(1)
    variants = [_read(1, tenant="x"), _read(2), _read(1, at=base.at + dt.timedelta(microseconds=1)), _read(1, principal="k2"),
                _read(1, identity=OTHER), _read(1, role="reviewer"), _read(1, op="fetch"), _read(1, workarea_ids=()),
                _read(1, claim_ids=("c2", "c1")), _read(1, query_digest=None)]
    leaves = {rl.leaf(v) for v in variants} | {rl.leaf(base)}
    assert len(leaves) == len(variants) + 1


def test_ranges():
    assert rl.compress_ranges([7, 1, 2, 3, 8]) == [[1, 3], [7, 8]]
    assert rl.expand_ranges([[1, 3], [7, 8]]) == {1, 2, 3, 7, 8}
    for ns in itertools.combinations(range(6), 3):
        assert rl.expand_ranges(rl.compress_ranges(ns)) == set(ns)


# ---------------------------------------------------------------- LoCoMo evidence ids and SQL hygiene

def test_locomo_evidence_ids_are_normalised():
    from oml_tools.bench.locomo import normalise_ids

    assert normalise_ids(["D8:6; D9:17", "D:11:26", "D30:05", "D", "D1:3", "D1:3", "", "X4:2"]) == [
        "D8:6", "D9:17", "D11:26", "D30:5", "D1:3"]
    assert normalise_ids([]) == [] and normalise_ids(None) == []


def test_every_read_path_statement_names_the_tenant():
    """Besides RLS, every statement on a tenant table names tenant_id (partition pruning under RLS)."""
    import re

    root = REPO / "services" / "reads"
    for name in ("recall.py", "fetch.py", "rows.py", "readlog.py"):
        src = (root / name).read_text()
        for m in re.finditer(r'sa\.text\(\s*((?:f?"[^"]*"\s*)+)', src):
            sql = "".join(re.findall(r'"([^"]*)"', m.group(1)))
            if re.search(r"\b(FROM|UPDATE|INTO)\s+(?!unnest|c\b|x\b|\()", sql, re.I) and "tsvector_to_array" not in sql \
                    and "set_config" not in sql and "oml_fts_search" not in sql and "{where}" not in sql:
                assert "tenant_id" in sql, (name, sql[:120])
    # The vector leg's statements are built around one WHERE clause.
    from oml.services.reads.recall import _Filters, _vector_where

    where, _ = _vector_where(_Filters(("main",), None, None, None, None, []))
    assert where.startswith("m.tenant_id = :t")
