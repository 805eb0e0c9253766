"""The one table of who may journal what (domain/authority.py) covers every type, and admission's acts agree with it."""
from __future__ import annotations

import ast

import pytest

from oml.domain import authority
from oml.domain.claims import ROLE_ACTS, ROLES
from oml.domain.errors import OMLError
from oml.domain.events import EVENT_TYPES, SYSTEM

from support.paths import REPO as ROOT

SOURCES = sorted(p for d in ("services", "workers") for p in (ROOT / d).rglob("*.py"))
APPENDERS = {"_append", "system_event", "append"}


def test_every_event_type_has_exactly_one_rule():
    assert set(authority.EVENT_RULES) == set(EVENT_TYPES)
    for rule in authority.EVENT_RULES.values():
        assert rule.act is None or any(rule.act in acts for acts in ROLE_ACTS.values()), rule
        assert rule.act is not None or rule.system  # a type no one may journal would be dead


def test_permitted_follows_role_acts_and_require_refuses():
    for etype, rule in authority.EVENT_RULES.items():
        for role in ROLES:
            assert authority.permitted(etype, role) == (rule.act is not None and rule.act in ROLE_ACTS[role])
        assert authority.permitted(etype, None) == rule.system
    assert not authority.permitted("no.such_type", "admin") and not authority.permitted("no.such_type", None)
    with pytest.raises(OMLError) as e:
        authority.require("principal.created", "writer")
    assert e.value.code == "access.denied" and e.value.status == 403
    with pytest.raises(OMLError):
        authority.require("claim.promoted", None)
    authority.require("claim.promoted", "reviewer")


def _literal_types(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in EVENT_TYPES}


def _acts_in_source():
    """(file, function, types appended, acts required, system actor?) for each function that appends an event."""
    out = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            types, acts, system = set(), set(), set()
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                name = getattr(call.func, "attr", getattr(call.func, "id", None))
                if name == "require_act" and len(call.args) == 2 and isinstance(call.args[1], ast.Constant):
                    acts.add(call.args[1].value)
                if name in APPENDERS and len(call.args) >= 2:
                    found = _literal_types(call.args[1])
                    types |= found
                    actor = call.args[2] if len(call.args) > 2 else None
                    if isinstance(actor, ast.Name) and actor.id == "SYSTEM":
                        system |= found
            if types:
                out.append((path.relative_to(ROOT), fn.name, types, acts, system))
    return out


def test_admissions_acts_agree_with_the_table():
    """Every literal type appended in services/ and workers/: its role check names the table's act, and an
    append as the system actor is of a type the table lets the system journal."""
    seen = set()
    acts = _acts_in_source()
    assert acts, "no appends found: the scan is broken"
    for path, fn, types, required, system in acts:
        for t in types:
            seen.add(t)
            rule = authority.EVENT_RULES[t]
            if required and t not in system:
                assert rule.act in required, f"{path}:{fn} requires {sorted(required)} for {t}, the table says {rule.act}"
        for t in system:
            assert authority.permitted(t, None), f"{path}:{fn} journals {t} as the system actor"
    # The types admission itself writes are all covered by the scan (the rest come from workers' reports).
    assert {"principal.created", "claim.promoted", "claim.submitted", "simulation.opened", "claim.hold_placed"} <= seen


def test_admission_checks_the_table_at_its_append_point():
    from oml.services.journal.acts import Acting, ActRunner

    assert ActRunner.role_of(None, SYSTEM) is None
    assert ActRunner.role_of(None, Acting("a" * 16, "i", "reader")) == "reader"
    assert Acting("a" * 16, "i", "reader").as_json() == {"principal": "a" * 16, "identity": "i"}
    src = (ROOT / "services/journal/acts.py").read_text()
    body = src[src.index("    def append("):src.index("    def idempotency_lookup(")]
    assert "authority.require(type, self.role_of(head, actor))" in body


def test_the_published_act_role_table_is_the_codes():
    """docs/journal-format.md publishes the event type → act → roles → system table for verifiers written from the
    docs alone; it must say exactly what domain/authority.py enforces."""
    import re

    doc = (ROOT / "docs" / "journal-format.md").read_text()
    block = re.search(r"<!-- authority-table:begin -->\n(.*?)<!-- authority-table:end -->", doc, re.S).group(1)
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()[2:] if line.strip()]
    published = {}
    for etype, act, roles, system in rows:
        published[etype.strip("`")] = (None if act == "—" else act.strip("`"),
                                       frozenset() if roles == "—" else frozenset(r.strip().strip("`") for r in roles.split(",")),
                                       {"yes": True, "no": False}[system])
    code = {t: (r.act, authority.roles_for(t), r.system) for t, r in authority.EVENT_RULES.items()}
    assert published == code
    assert set(published) == set(EVENT_TYPES)
