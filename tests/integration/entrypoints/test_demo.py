"""``oml demo`` end to end on a small input, as CI runs it (docs/demo.md).

The demo runs as a subprocess (``python -m oml.services.entrypoints.cli.main demo``), so
the command, its exit status and the ``oml mcp`` process it spawns are the
real ones. It uses a fresh database on the test server (``OML_DATABASE_URL``)
rather than starting a second embedded PostgreSQL, and a temporary home for
its lake, keys and reports. The input is LoCoMo when ``SHARED`` holds it,
else CPython's pydoc topics (what a clone without the shared data gets).
"""
from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from oml_tools.demo import corpus

from support.database import drop_database, fresh_database
from support.paths import SHARED

TURNS = 20


@pytest.fixture(scope="module")
def demo_run(pg_server, template_db, tmp_path_factory):
    url = fresh_database(pg_server, template_db)
    home = tmp_path_factory.mktemp("demo-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OML_")}
    env.update(OML_DATABASE_URL=url, OML_MASTER_KEY=secrets.token_hex(32), OML_SHARED_DIR=str(SHARED),
               HF_HUB_OFFLINE="1", COLUMNS="160", OML_HTTP_PORT="8799")
    cmd = [sys.executable, "-m", "oml.services.entrypoints.cli.main", "demo", "--conversations", "1", "--turns", str(TURNS),
           "--questions", "2", "--home", str(home)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
        yield p, home
    finally:
        drop_database(pg_server, url)


def _summary_path(home: Path) -> Path:
    found = sorted((home / "demo").glob("*/summary.json"))
    assert len(found) == 1, found
    return found[0]


def _summary(home: Path) -> dict:
    return json.loads(_summary_path(home).read_text())


def test_demo_exits_0_having_played_every_role(demo_run):
    p, home = demo_run
    assert p.returncode == 0, (p.stdout[-4000:], p.stderr[-4000:])
    assert "demo OK" in p.stdout
    s = _summary(home)
    assert s["ok"] and s["failure"] is None and s["database"] == "external (OML_DATABASE_URL)"
    assert [r["ok"] for r in s["steps"]] == [True] * 11
    expected = "locomo" if corpus.default_data_path() else "pydoc"
    assert s["corpus"]["name"] == expected and s["corpus"]["turns"] == TURNS
    c = s["counts"]
    # Every turn plus the steering row was written, and every admitted one promoted.
    assert c["submitted"] + c["refused_personal_data"] == TURNS + 1
    assert c["promoted"] == c["submitted"]
    assert c["questions"] == s["corpus"]["questions"] >= 1
    assert c["erased"] == 1 and c["evidence_events"] > c["journal_events"] > c["submitted"]
    # The erased claim was recalled before and is gone after (the step asserted the "after").
    assert s["erased"]["claim_id"] == s["recalls"][0]["claim_ids"][0]
    assert "self-promotion refused" in s["steps"][4]["outcome"]
    assert "VERIFIED and ANCHORED" in s["steps"][10]["outcome"]
    # No worker waited past lock_timeout on another session (test_the_demo_server_loads_the_model_before_its_workers).
    assert "did not answer in time" not in p.stdout + p.stderr, (p.stdout[-4000:], p.stderr[-4000:])


def test_demo_writes_its_reports_and_keys(demo_run):
    p, home = demo_run
    assert p.returncode == 0
    s = _summary(home)
    r = s["reports"]
    for name in ("reconciliation_html", "reconciliation_json", "erasure_html", "erasure_json", "evidence_archive",
                 "checkpoint_kept_by_auditor"):
        assert Path(r[name]).is_file(), name
    assert "<html" in Path(r["reconciliation_html"]).read_text().lower()
    rec = json.loads(Path(r["reconciliation_json"]).read_text())
    assert rec["ok"] and rec["anchored"] and rec["tenant"] == s["tenant"]
    er = json.loads(Path(r["erasure_json"]).read_text())
    lake = next(c for c in er["classes"] if c["key"] == "lake_ciphertext")
    assert lake["status"] == "complete"
    keys = _summary_path(home).with_name("keys.env")
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert "OML_READER_KEY=oml_" in keys.read_text()
    # No live key on the screen: the summary's `oml mcp` line reads it from keys.env.
    secrets_in_file = [line.split("=", 1)[1] for line in keys.read_text().splitlines() if line.startswith("OML_") and "_KEY=" in line]
    assert secrets_in_file and not any(k in p.stdout or k in p.stderr for k in secrets_in_file)
    assert "OML_READER_KEY=" in p.stdout and str(keys) in p.stdout
    # The trust anchor is recorded outside the database, where `oml reconcile` looks by default.
    assert f"{s['tenant']} {s['trust_anchor']}" in (home / "trust-anchors").read_text()
    # The summary tells how to keep serving and how to point an agent at it.
    assert "oml serve" in p.stdout and "oml mcp" in p.stdout
    assert "HTTP API on 127.0.0.1:8799" in p.stdout  # the port `oml serve` will use (OML_HTTP_PORT), not a constant
    # No plaintext body in the reports or the evidence archive: the erased turn's text in particular.
    turns = corpus.load(None, 1, TURNS, 2).conversations[0].turns
    text = next(t.text for t in turns if t.locator == s["erased"]["locator"])
    for name in ("reconciliation_html", "reconciliation_json", "erasure_html", "erasure_json", "evidence_archive"):
        assert text.encode() not in Path(r[name]).read_bytes(), name


def test_pydoc_fallback_corpus_has_questions_whose_evidence_is_ingested():
    c = corpus._pydoc(2, 15, 3)
    assert c.name == "pydoc" and len(c.conversations) == 2
    for conv in c.conversations:
        assert 0 < len(conv.turns) <= 15
        have = {t.locator for t in conv.turns}
        assert conv.questions and all(set(q.evidence) <= have for q in conv.questions)
        assert all(t.statement() and len(t.text) >= 60 for t in conv.turns)


@pytest.mark.skipif(corpus.default_data_path() is None and not (SHARED / corpus.LOCOMO_FILE).is_file(),
                    reason="no LoCoMo data in SHARED")
def test_locomo_corpus_slices_turns_and_keeps_answerable_questions():
    c = corpus.load(SHARED / corpus.LOCOMO_FILE, 2, 30, 5)
    assert c.name == "locomo" and [len(x.turns) for x in c.conversations] == [30, 30]
    for conv in c.conversations:
        have = {t.locator for t in conv.turns}
        assert all(set(q.evidence) <= have for q in conv.questions)
        assert conv.turns[0].locator == "D1:1" and conv.turns[0].date in conv.turns[0].statement()
    assert corpus._norm_dia("D8:6; D9:17") == ["D8:6", "D9:17"]
    assert corpus._norm_dia("D:11:26") == ["D11:26"] and corpus._norm_dia("D30:05") == ["D30:5"]


def test_demo_exits_1_naming_the_step_that_failed(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list of conversations"}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("OML_")}
    p = subprocess.run([sys.executable, "-m", "oml.services.entrypoints.cli.main", "demo", "--data", str(bad), "--home", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 1 and "demo FAILED" in p.stderr and "read the input" in p.stderr


def test_ctrl_c_stops_the_demo_without_a_traceback_or_an_anchor(pg_server, template_db, tmp_path):
    """Ctrl-C printed a KeyboardInterrupt traceback and left the half-made tenant in the trust anchors."""
    import signal

    url = fresh_database(pg_server, template_db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OML_")}
    env.update(OML_DATABASE_URL=url, OML_MASTER_KEY=secrets.token_hex(32), OML_SHARED_DIR=str(SHARED),
               HF_HUB_OFFLINE="1", COLUMNS="160", OML_HTTP_PORT="8798", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "oml.services.entrypoints.cli.main", "demo", "--conversations", "1", "--turns", "5",
           "--questions", "1", "--home", str(tmp_path), "--tenant", "demo-interrupted"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        seen = []
        for line in p.stdout:  # interrupt once the tenant exists, as a user would mid-run
            seen.append(line)
            if "trust anchor (signing key fingerprint)" in line:
                p.send_signal(signal.SIGINT)
                break
        try:
            out, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            # Under load the first signal can land before the step's handler is in place; a user presses again.
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
        drop_database(pg_server, url)
    text = "".join(seen) + out + err
    assert p.returncode == 130, text[-3000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert "interrupted" in err and "demo-interrupted" in err
    anchors = tmp_path / "trust-anchors"
    assert not anchors.exists() or "demo-interrupted" not in anchors.read_text()


class _IdleRuntime:
    def stop(self, timeout_ms: int = 0) -> None:
        pass


def test_the_demo_server_loads_the_model_before_its_workers(ctx, monkeypatch):
    """The demo's in-process workers start with the indexer's model loaded and checked, as `oml serve`'s do. The
    first batch would otherwise load it (seconds) while holding its tenant's indexer cursor row ``FOR UPDATE``, and
    the other worker thread's catch-up of the tenant, woken by the next promotion, waited on that row past
    ``lock_timeout`` (a retry line in step 5)."""
    from oml.workers.index import indexer
    from oml.workers.runtime import actors
    from oml_tools.demo.server import LocalServer

    order: list[str] = []
    load = indexer.embedder_for
    monkeypatch.setattr(indexer, "embedder_for", lambda c: (order.append("model"), load(c))[1])
    monkeypatch.setattr(actors, "start_workers", lambda c, **kw: (order.append("workers"), _IdleRuntime())[1])
    server = LocalServer(ctx).start()
    try:
        assert order == ["model", "workers"]
    finally:
        server.stop()
