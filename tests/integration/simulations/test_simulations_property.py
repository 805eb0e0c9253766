"""Property: a simulation is invisible outside its audience (docs/simulations.md, "The read path").

For random interleavings of real acts (submit, promote, reject, supersede,
derive, demote, erase) and simulated acts (open with a random audience,
write inside, supersede a real claim inside, derive from simulation
material, promote, demote, erase a simulation claim, close), every recall,
fetch and lineage answer a key outside every audience gets is identical to
the answer in a world where the simulated acts never happened, and the
default tip of every claim is the same.

The comparison (docs/simulations.md, "How containment is tested"):

* **Two tenants per example.** World A runs every act; world B, the twin,
  runs only the real acts, in the same order, interleaved act by act.
* **Identical ids.** Ids are drawn from a deterministic source keyed by the
  act (``uuid5(example salt, act label, n)``), so a real act creates the
  same claim, version, workarea and identity ids in both worlds, and the
  simulated acts of A draw from labels B never uses. Answers are then
  compared as JSON, ids included — which also fixes every tie-break by id
  (ranking, fusion) to the same order. Principal ids (random API key ids)
  appear in no recall, fetch or lineage answer; in the review queue they are
  mapped to the key's name in the script. The only fields dropped are
  wall-clock times (``tip_since``, ``elapsed_ms``, and the valid instant a
  default recall checks hits against, ``diagnostics.valid_time.at`` = now),
  which cannot match across two tenants.
* **Every real act's answer** (a writer's admitted ids and numbers, a
  reviewer's decision) is identical in both worlds, whole: no journal seq
  reaches a writer or reviewer.
* **Every key outside every audience** (a reader rooted at the tenant root,
  a reader rooted in a sub-workarea, a reviewer) asks, in both worlds: six
  recalls (three queries hybrid, one FTS, one vector, one scoped to a
  sub-workarea; k = 50, so no tie is cut), a fetch of every claim id and
  every version id either world ever created (simulation ids included:
  they must be as unknown in A as they are absent from B), the lineage
  of every claim id, the workareas it may list and (reviewers) the review
  queue, paged two at a time, cursors included. Errors are compared by code.
* **Default tips.** The tip-interval history (version ids, in order) and the
  untainted rows of ``claim_versions`` (number, status, supersedes,
  provenance, kind, workarea) of every real claim are equal between worlds.
  Seqs are not compared: the journal seq counts every act, simulated ones
  included (docs/simulations.md says who can see a seq).
* **After closing** every simulation, *every* key — former audience members
  included — gets exactly the twin's answers.
"""
from __future__ import annotations

import itertools
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from unittest import mock

import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from oml.domain.errors import OMLError
from oml.services.claims import admission as admission_service
from oml.services.claims.admission import Submission
from oml.services.entrypoints.http.routes_admin import list_workareas
from oml.services.entrypoints.http.routes_claims import review_queue
from oml.services.erasure.acts import Erasure
from oml.services.reads import fetch as F
from oml.services.reads.recall import Recaller, RecallRequest
from oml.services.runtime.auth import authenticate
from oml.services.simulations import acts as sim_service
from oml.services.simulations.acts import Simulations
from oml.services.tenancy import acts as tenancy_service
from oml.workers.index.indexer import catch_up

from support.recall import owner

VOCAB = ["deploy", "window", "migration", "database", "backup", "schedule", "search", "ranking", "model", "cluster",
         "latency", "friday", "tuesday", "rollback", "incident", "review", "storage", "network"]
QUERIES = ["deploy window migration", "database backup schedule", "search ranking model latency"]
DROP = {"tip_since", "elapsed_ms", "at"}
_examples = itertools.count()


class Ids:
    """Deterministic ids: the n-th id drawn under ``label`` is ``uuid5(salt, f"{label}/{n}")``."""

    def __init__(self, salt: str) -> None:
        self.ns = uuid.uuid5(uuid.NAMESPACE_URL, f"oml-sim-property/{salt}")
        self.label, self.n = "setup", itertools.count()

    def at(self, label: str) -> None:
        self.label, self.n = label, itertools.count()

    def __call__(self) -> str:
        return str(uuid.uuid5(self.ns, f"{self.label}/{next(self.n)}"))


@dataclass
class World:
    tenant: str
    keys: dict = field(default_factory=dict)      # role name -> Principal
    areas: dict = field(default_factory=dict)     # label -> node id


def build(ctx, tenant: str, ids: Ids) -> World:
    ids.at("setup")
    t = ctx.tenancy.create_tenant(tenant, "main")
    admin = authenticate(ctx.db, t.admin_key)
    w = World(tenant, {"admin": admin}, {"main": t.root_workarea})
    for label in ("a", "b"):
        w.areas[label] = ctx.tenancy.create_workarea(admin, label, t.root_workarea)["node_id"]
    spec = [("writer", "writer", "main"), ("reviewer", "reviewer", "main"), ("operator", "operator", "main"),
            ("out_reader", "reader", "main"), ("out_reader_b", "reader", "b"), ("out_reviewer", "reviewer", "main"),
            ("sim_writer", "writer", "main"), ("sim_reviewer", "reviewer", "main"), ("in_reader", "reader", "main"),
            ("in_reader_a", "reader", "a")]
    for name, role, root in spec:
        ident = ctx.tenancy.create_identity(admin, "service", name)["identity_id"]
        key = ctx.tenancy.create_principal(admin, ident, role, [w.areas[root]])["api_key"]
        w.keys[name] = authenticate(ctx.db, key)
    return w


OUTSIDERS = ("out_reader", "out_reader_b", "out_reviewer")
# After every simulation closed: former audience members (and the tenant's own reviewer, often one).
READERS = ("in_reader", "in_reader_a", "reviewer", "sim_reviewer")
# Keys a random audience may include (the outsiders never are).
MEMBERS = ("sim_writer", "sim_reviewer", "in_reader", "in_reader_a", "writer", "reviewer")

REAL = ("submit", "promote", "reject", "supersede", "derive", "demote", "erase")
SIM = ("open", "close", "sim_submit", "sim_supersede", "sim_derive", "sim_promote", "sim_demote", "sim_erase")
# Weighted: writes and promotions come often enough that the later acts find something to act on.
WEIGHTED = REAL + SIM + ("submit", "promote", "supersede", "sim_submit", "sim_supersede", "sim_promote", "sim_promote")
acts = st.lists(st.tuples(st.sampled_from(WEIGHTED), st.integers(0, 10_000), st.integers(0, 10_000),
                          st.lists(st.integers(0, len(VOCAB) - 1), min_size=3, max_size=6)),
                min_size=4, max_size=14)
# Every example starts from a few promoted real claims (one of them steering) and one open simulation.
PREAMBLE = [("submit", 0, 1, [0, 1, 2]), ("submit", 1, 5, [3, 4, 5]), ("submit", 2, 2, [6, 7, 8]),
            ("promote", 0, 0, [0, 0, 0]), ("promote", 0, 0, [0, 0, 0]), ("promote", 0, 0, [0, 0, 0])]


def outcome(fn):
    try:
        return ("ok", fn())
    except OMLError as exc:
        return ("error", exc.code)


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in DROP}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def queue_pages(ctx, p, names, size: int = 2) -> list:
    """Every page of the review queue, cursors included; API key ids (random per world) mapped to key names."""
    pages, after = [], None
    while True:
        page = review_queue(ctx, p, limit=size, after=after)
        pages.append({"items": [{k: (names.get(v, v) if k == "author_principal" else v) for k, v in item.items()}
                                for item in page["items"]], "next_after": page["next_after"]})
        after = page["next_after"]
        if after is None:
            return pages


def pick(seq, n):
    return seq[n % len(seq)] if seq else None


class Run:
    def __init__(self, ctx, n: int, ids: Ids):
        self.ctx = ctx
        self.ids = ids
        self.A = build(ctx, f"simprop-{n}-a", self.ids)
        self.B = build(ctx, f"simprop-{n}-b", self.ids)
        self.sims = Simulations(ctx)
        self.erasure = Erasure(ctx)
        self.claims: list[str] = []      # every claim id either world created, in order
        self.versions: list[str] = []
        self.open_sims: list[tuple[str, frozenset[str]]] = []   # (simulation id, audience role names)
        self.all_sims: list[str] = []

    # ---------------------------------------------------------------- helpers
    def q(self, w: World, sql: str, **kw):
        with owner(self.ctx, w.tenant) as c:
            return c.execute(sa.text(sql), {"t": w.tenant, **kw}).all()

    def real_claims(self):
        return [str(r.claim_id) for r in self.q(self.B, "SELECT claim_id FROM claims WHERE tenant_id = :t AND erased_seq IS NULL"
                                                " ORDER BY created_seq")]

    def versions_with(self, w: World, status: str, tainted: bool):
        return [str(r.version_id) for r in self.q(w, "SELECT version_id FROM claim_versions WHERE tenant_id = :t AND status = :s"
                                                  " AND tainted = :x ORDER BY submitted_seq", s=status, x=tainted)]

    def sim_claims(self):
        return [str(r.claim_id) for r in self.q(self.A, "SELECT claim_id FROM claims WHERE tenant_id = :t AND simulation_id IS NOT NULL"
                                                " AND erased_seq IS NULL ORDER BY created_seq")]

    def default_tip(self, w: World, claim: str):
        r = self.q(w, "SELECT version_id FROM tip_intervals WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid) AND to_seq IS NULL", c=claim)
        return str(r[0].version_id) if r else None

    def workarea_of(self, w: World, claim: str):
        return str(self.q(w, "SELECT workarea_id FROM claims WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid)", c=claim)[0].workarea_id)

    def text(self, words):
        return " ".join(VOCAB[i] for i in words) + "."

    def both(self, label: str, fn, view=lambda r: r):
        """Run a real act in A and in B under the same id label; the outcomes must be equal (``view`` of a result)."""
        self.ids.at(label)
        a = outcome(lambda: fn(self.A))
        self.ids.at(label)
        b = outcome(lambda: fn(self.B))
        # Whole answers: a write or review answer carries no journal seq (docs/simulations.md, "Sequence numbers").
        va = a if a[0] == "error" else ("ok", view(a[1]))
        vb = b if b[0] == "error" else ("ok", view(b[1]))
        assert va == vb, (label, a, b)
        return a

    def track(self, out):
        if out[0] == "ok" and isinstance(out[1], dict):
            items = out[1].get("items", [out[1]])
            for it in items:
                if "claim_id" in it and it["claim_id"] not in self.claims:
                    self.claims.append(it["claim_id"])
                if "version_id" in it and it["version_id"] not in self.versions:
                    self.versions.append(it["version_id"])

    # ---------------------------------------------------------------- acts
    def act(self, i: int, name: str, x: int, y: int, words: list[int]) -> None:
        label = f"act{i}"
        adm = self.ctx.admission
        event(f"act {name}")
        if name == "submit":
            area = ("a", "b", "main")[x % 3]
            kind = "steering" if y % 5 == 0 else "fact"
            out = self.both(label, lambda w: adm.submit(w.keys["writer"], [Submission(w.areas[area], {"statement": self.text(words)},
                                                                                        kind=kind)]))
        elif name in ("promote", "reject"):
            v = pick(self.versions_with(self.B, "held", False), x)
            if v is None:
                return
            out = self.both(label, lambda w: adm.review(w.keys["reviewer"], v, name, "accurate" if name == "promote" else "inaccurate"))
        elif name == "demote":
            v = pick(self.versions_with(self.B, "promoted", False), x)
            if v is None:
                return
            out = self.both(label, lambda w: adm.review(w.keys["reviewer"], v, "demote", "outdated"))
        elif name == "supersede":
            c = pick(self.real_claims(), x)
            if c is None:
                return
            sup = self.default_tip(self.B, c)
            out = self.both(label, lambda w: adm.submit(w.keys["writer"], [Submission(
                self.workarea_of(w, c), {"statement": self.text(words)}, claim_id=c, supersedes=sup)]))
        elif name == "derive":
            real = self.real_claims()
            srcs = sorted({pick(real, x), pick(real, y)} - {None})
            if not srcs:
                return
            out = self.both(label, lambda w: adm.submit(w.keys["writer"], [Submission(
                w.areas["a"], {"statement": self.text(words)}, derived_from=srcs)]))
        elif name == "erase":
            c = pick(self.real_claims(), x)
            if c is None:
                return
            # An operator's erasure report (artifact digests, shred counts) is inside the trust boundary
            # (docs/simulations.md); what must match is which claims were erased, or the refusal.
            out = self.both(label, lambda w: self.erasure.erase_claim(w.keys["operator"], c, "retention", rewrite=False),
                            view=lambda r: [e["claim_id"] for e in r["erasures"]])
        else:
            out = self.sim_act(label, name, x, y, words)
        if out is not None:
            event(f"{name}: {out[0] if out[0] == 'ok' else out[1]}")
            self.track(out)

    def sim_act(self, label: str, name: str, x: int, y: int, words: list[int]):
        A, adm = self.A, self.ctx.admission
        self.ids.at("sim-" + label)
        if name == "open":
            mask = x | (0b11 if x % 4 else 0)  # most audiences hold the simulation's writer and reviewer
            members = frozenset(m for j, m in enumerate(MEMBERS) if (mask >> j) & 1)
            out = outcome(lambda: self.sims.open(A.keys["admin"], f"what if {label}", [A.keys[m].principal_id for m in members]))
            if out[0] == "ok":
                self.open_sims.append((out[1]["simulation_id"], members))
                self.all_sims.append(out[1]["simulation_id"])
            return out
        if name != "sim_erase" and not self.open_sims:
            self.sim_act(label + "-open", "open", x, y, words)  # acts inside need a simulation
        sim = pick(self.open_sims, x)
        if name == "close":
            return None if sim is None else self._close(sim)
        if name == "sim_submit":
            if sim is None:
                return None
            return outcome(lambda: self.sims.submit(A.keys["sim_writer"], sim[0], [Submission(
                A.areas[("a", "b", "main")[y % 3]], {"statement": self.text(words)}, kind="steering" if y % 7 == 0 else "fact")]))
        if name == "sim_supersede":
            c = pick(self.real_claims() + self.sim_claims(), y)
            if sim is None or c is None:
                return None
            # Half the time the new version also derives from a real claim: an edge that exists only inside the fence.
            derived = [pick(self.real_claims(), x)] if x % 2 and self.real_claims() else []
            return outcome(lambda: self.sims.supersede(A.keys["sim_writer"], sim[0], c, {"statement": self.text(words)},
                                                       derived_from=derived))
        if name == "sim_derive":
            src = pick(self.sim_claims(), y)
            real = pick(self.real_claims(), x)
            if src is None:
                return None
            return outcome(lambda: adm.submit(A.keys["sim_writer"], [Submission(
                A.areas["a"], {"statement": self.text(words)}, derived_from=sorted({src, real} - {None}))]))
        if name in ("sim_promote", "sim_demote"):
            v = pick(self.versions_with(A, "held" if name == "sim_promote" else "promoted", True), y)
            if v is None:
                return None
            out = outcome(lambda: adm.review(A.keys["sim_reviewer"], v, "promote" if name == "sim_promote" else "demote", "accurate"))
            if out[0] == "error":
                assert out[1] in ("simulation.tip_refused", "claim.not_found", "claim.stale_supersession",
                                  "claim.erased", "access.separation_of_duties"), out
            return out
        if name == "sim_erase":
            c = pick(self.sim_claims(), y)
            if c is None:
                return None
            return outcome(lambda: self.erasure.erase_claim(A.keys["operator"], c, "retention", rewrite=False))
        raise AssertionError(name)

    def _close(self, sim):
        out = outcome(lambda: self.sims.close(self.A.keys["admin"], sim[0]))
        assert out[0] == "ok", out
        self.open_sims.remove(sim)
        # A held version of the closed simulation can no longer be promoted: it could only become a default tip.
        held = self.q(self.A, "SELECT version_id FROM claim_versions WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"
                              " AND status = 'held' ORDER BY submitted_seq LIMIT 1", s=sim[0])
        if held and "sim_reviewer" in sim[1]:
            refused = outcome(lambda: self.ctx.admission.review(self.A.keys["sim_reviewer"], str(held[0].version_id), "promote",
                                                                "accurate"))
            assert refused == ("error", "simulation.tip_refused"), refused
            event("promote after close: simulation.tip_refused")
        return out

    # ---------------------------------------------------------------- observations
    def answers(self, w: World, who: str) -> dict:
        p = w.keys[who]
        rec = Recaller(self.ctx)
        out: dict = {}
        asks = [(q, "hybrid", None) for q in QUERIES] + [(QUERIES[0], "fts", None), (QUERIES[1], "vector", None),
                                                         (QUERIES[2], "hybrid", "a")]
        for q, retriever, scope in asks:
            out[("recall", q, retriever, scope)] = outcome(lambda: strip(rec.recall(
                p, RecallRequest(query=q, retriever=retriever, k=50, workarea_id=scope and w.areas[scope]))))
        for c in self.claims:
            out[("fetch", c)] = outcome(lambda: strip(F.fetch(self.ctx, p, claim_id=c)))
            out[("lineage", c)] = outcome(lambda: strip(F.lineage(self.ctx, p, c)))
        for v in self.versions:
            out[("fetch_version", v)] = outcome(lambda: strip(F.fetch(self.ctx, p, version_id=v)))
        out[("workareas",)] = outcome(lambda: list_workareas(self.ctx, p))
        if p.role == "reviewer":
            # The review queue's rows (bodies included) and its opaque cursors.
            names = {k.principal_id: n for n, k in w.keys.items()}   # API key ids differ between worlds: map to roles
            out[("review_queue",)] = outcome(lambda: queue_pages(self.ctx, p, names))
        return out

    def default_state(self, w: World) -> dict:
        real = set(self.q(self.B, "SELECT claim_id FROM claims WHERE tenant_id = :t"))
        real = sorted(str(r.claim_id) for r in real)
        tips = {c: [str(r.version_id) for r in self.q(
            w, "SELECT version_id FROM tip_intervals WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid) ORDER BY from_seq", c=c)]
            for c in real}
        rows = [tuple(str(x) if x is not None else None for x in r) for r in self.q(
            w, "SELECT version_id, claim_id, version_no, status, supersedes, provenance, kind, workarea_id, valid_from"
               " FROM claim_versions WHERE tenant_id = :t AND NOT tainted ORDER BY claim_id, version_no")]
        return {"tips": tips, "versions": rows}

    def check(self, keys) -> None:
        catch_up(self.ctx, self.A.tenant)
        catch_up(self.ctx, self.B.tenant)
        assert self.default_state(self.A) == self.default_state(self.B)
        for who in keys:
            a, b = self.answers(self.A, who), self.answers(self.B, who)
            for k in b:
                assert a[k] == b[k], (who, k, a[k], b[k])


@settings(max_examples=20, deadline=None, database=None, phases=(Phase.explicit, Phase.generate, Phase.shrink),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(script=acts)
def test_outside_every_audience_nothing_differs(ctx, script):
    n = next(_examples)
    ids = Ids(f"example-{n}-{uuid.uuid4()}")
    with ExitStack() as stack:
        for mod in (admission_service, sim_service, tenancy_service):
            stack.enter_context(mock.patch.object(mod, "new_id", ids))
        run = Run(ctx, n, ids)
        for i, (name, x, y, words) in enumerate(PREAMBLE + [("open", 0b1111, 0, [0, 0, 0])] + script):
            run.act(i, name, x, y, words)
        run.check(OUTSIDERS)
        for sim in list(run.open_sims):
            run._close(sim)
        run.check(READERS)
    event(f"simulations opened: {min(len(run.all_sims), 3)}+")
