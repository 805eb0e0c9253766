"""The demo scenario: every role plays its part against a running OML, over the real interfaces.

Steps (docs/demo.md):

1. start OML on the process's settings (embedded PostgreSQL by default, or
   ``OML_DATABASE_URL``), serve the HTTP API on a free 127.0.0.1 port and
   start the in-process workers;
2. the operator creates a tenant (``oml tenant create``'s code path) and
   records its trust anchor in ``<home>/trust-anchors``;
3. the bootstrap admin key creates workareas, identities and API keys over
   HTTP with the Python client;
4. an internal service writes the corpus as claims in batches with
   ``Idempotency-Key``s, plus a steering row, and retries one batch to show
   the replay appends nothing;
5. the service's own reviewer key tries to promote its own claim and is
   refused (``access.separation_of_duties``); a reviewer promotes every held
   claim from the review queue;
6. the lake-writer and the indexer catch up (progress shown); the operator
   signs a checkpoint and the auditor keeps it;
7. an agent connects to ``oml mcp`` (stdio) with the MCP SDK's client;
8. the agent recalls the corpus's questions: steering first, hits with citations;
9. the operator erases one recalled claim, purges the lake (erasure report
   written), and the agent's recall and fetch no longer serve it;
10. the operator reconciles PostgreSQL, the lake and the chain (report written);
11. the auditor exports evidence over HTTP and verifies it offline with the
    trust anchor (``oml evidence verify`` in a process without OML settings).

Each step asserts its outcome; :func:`run` returns the summary or raises
:class:`~oml_tools.demo.steps.DemoFailed`.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oml_tools.demo import corpus as corpus_mod
from oml_tools.demo.agent import McpAgent, ToolFailed, oml_command
from oml_tools.demo.server import LocalServer
from oml_tools.demo.steps import DemoFailed, Steps, check

STEERING = ("When you answer from these conversations, cite the dialogue turn you rely on (its source locator) "
            "and the session date, and say you do not know when no memory supports the answer.")
TOP_K = 5
SHOWN_HITS = 3


@dataclass
class Options:
    """``data``: LoCoMo file or folder (None: default path, else pydoc); ``conversations`` × ``turns``
    (turns per conversation); ``questions`` per conversation; ``batch`` claims per write request;
    ``port`` 0 = a free one; ``catch_up_timeout`` seconds; ``keep``: serve until interrupted at the end."""

    data: Path | None = None
    conversations: int = 2
    turns: int = 150
    questions: int = 3
    batch: int = 50
    tenant: str | None = None
    port: int = 0
    catch_up_timeout: float = 900.0
    keep: bool = False


@dataclass
class World:
    """What the scenario created, passed from step to step."""

    tenant: str = ""
    fingerprint: str = ""
    anchors: str = ""      # the trust-anchors file, once the complete run recorded the anchor there
    url: str = ""
    root: str = ""
    parent: str = ""
    workareas: dict[str, str] = field(default_factory=dict)       # conversation key → node id
    keys: dict[str, str] = field(default_factory=dict)            # role name → API key
    claims: dict[tuple[str, str], dict] = field(default_factory=dict)  # (conv, locator) → {claim_id, version_id}
    steering: dict = field(default_factory=dict)
    refused: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (conv, locator, kinds)
    counts: dict[str, int] = field(default_factory=dict)
    reports: dict[str, str] = field(default_factory=dict)
    recalls: list[dict] = field(default_factory=list)
    erased: dict = field(default_factory=dict)


def _short(text: str, n: int = 110) -> str:
    """One line of at most ``n`` characters, escaped for Rich markup (corpus text holds brackets)."""
    text = " ".join(str(text).split())
    return escape(text if len(text) <= n else text[: n - 1] + "…")


def _tenant_slug() -> str:
    # The random suffix keeps two demos started in the same second apart.
    return "demo-" + dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _bar(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


def _head(ctx, tenant: str) -> int:
    from oml.workers.runtime import lag

    rows = lag.report(ctx, tenant=tenant)
    return rows[0].head if rows else 0


# ====================================================================== the run
def run(settings, opts: Options, console: Console | None = None) -> dict[str, Any]:
    """Play the whole scenario on ``settings`` (an :class:`oml.services.runtime.settings.Settings`).

    Returns the summary (also written as ``<home>/demo/<tenant>/summary.json``).
    Raises :class:`DemoFailed` naming the first step that did not do what it should.
    """
    from oml.services.runtime.context import open_context

    console = console or Console()
    steps = Steps(console)
    w = World(tenant=opts.tenant or _tenant_slug())
    home = Path(settings.home).resolve()
    out = home / "demo" / w.tenant
    started = time.perf_counter()
    ctx = server = agent = None
    failure: DemoFailed | None = None
    corpus = None
    in_main = threading.current_thread() is threading.main_thread()
    previous_sigint = signal.signal(signal.SIGINT, steps.on_sigint) if in_main else None
    try:
        try:
            corpus = corpus_mod.load(opts.data, opts.conversations, opts.turns, opts.questions)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise DemoFailed(f"cannot read the input ({type(exc).__name__}: {exc})", "read the input") from None
        check(corpus.turns > 0, "the corpus is empty")
        check(corpus.questions > 0, "no question of the corpus has all its evidence among the ingested turns: ingest more turns")
        console.print(f"input: [bold]{corpus.name}[/bold] ({corpus.source}): {len(corpus.conversations)} conversation(s), "
                      f"{corpus.turns} turns, {corpus.questions} questions; home {home}")
        out.mkdir(parents=True, exist_ok=True)

        with steps.step("Start OML: database, migrations, HTTP API, in-process workers") as s:
            ctx = open_context(settings)
            server = LocalServer(ctx, port=opts.port).start()
            w.url = server.url
            from oml.client import OMLClient

            with OMLClient(w.url) as anon:
                check(anon.health().status == "ok", "GET /healthz did not answer ok")
            db = "embedded PostgreSQL under " + str(home / "pg") if not settings.database_url else "OML_DATABASE_URL"
            s.outcome = f"HTTP API on {w.url} ({db}; lake {settings.lake}; workers in-process)"

        _create_tenant(steps, ctx, w, home)
        _set_up(steps, w, corpus)
        _write(steps, ctx, w, corpus, opts)
        _review(steps, w)
        _catch_up(steps, ctx, w, opts, out, "Workers catch up: lake-writer and indexer; the auditor keeps a checkpoint")
        agent = _start_agent(steps, ctx, w, settings, out)
        _recall(steps, w, corpus, agent)
        _erase(steps, ctx, w, opts, agent, out)
        _reconcile(steps, ctx, w, opts, out)
        _audit(steps, w, out)
        steps.raise_if_interrupted()  # never an anchor for an interrupted run
        _record_anchor(ctx, w)
    except DemoFailed as exc:
        failure = exc
    except KeyboardInterrupt:
        failure = DemoFailed(f"interrupted (Ctrl-C); tenant {w.tenant} stays in the database, as every tenant does (the "
                             "journal is append-only), with no trust anchor recorded", interrupted=True)
    finally:
        if agent is not None:
            agent.close()
        summary = _summary(w, corpus, steps, home, settings, time.perf_counter() - started, failure)
        if out.exists():
            (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
            summary["reports"]["summary"] = str(out / "summary.json")
        if failure is None:
            _print_summary(console, summary, w, settings, home)
            if opts.keep and server is not None:
                _serve_until_interrupted(console, server)
        if server is not None:
            server.stop()
        if ctx is not None:
            ctx.close()
        if previous_sigint is not None:
            signal.signal(signal.SIGINT, previous_sigint)
    if failure is not None:
        raise failure
    return summary


# ====================================================================== steps
def _record_anchor(ctx, w: World) -> None:
    from oml.services.keys.anchors import record_anchor

    anchors, _ = record_anchor(ctx.settings, w.tenant, w.fingerprint)
    w.anchors = str(anchors)


def _create_tenant(steps: Steps, ctx, w: World, home: Path) -> None:
    with steps.step("Operator creates the tenant (oml tenant create)") as s:
        t = ctx.tenancy.create_tenant(w.tenant, "main")
        check(len(t.fingerprint) == 64 and t.admin_key.startswith("oml_"), "tenant creation returned no trust anchor or admin key")
        w.fingerprint, w.root = t.fingerprint, t.root_workarea
        w.keys["admin"] = t.admin_key
        # The anchor is recorded outside the database, as `oml tenant create` does (docs/anchoring.md), but only once
        # the run is complete (_record_anchor): an interrupted or failed run leaves no anchor for a half-made tenant.
        steps.console.print(f"tenant [bold]{w.tenant}[/bold]\ntrust anchor (signing key fingerprint): [bold]{w.fingerprint}[/bold]"
                            "\n  recorded in the trust-anchors file when the run completes; the recovery private key "
                            "printed by `oml tenant create` is discarded here")
        s.outcome = "tenant, signing/encryption/recovery keys, root workarea and a bootstrap admin key"


ROLES = (  # name, identity, kind, display name, role, roots ("parent" | "root")
    ("writer", "service", "service", "locomo-ingest (internal service)", "writer", "parent"),
    ("service-reviewer", "service", None, None, "reviewer", "parent"),  # same identity as the writer
    ("reviewer", "reviewer", "person", "Rosa (reviewer)", "reviewer", "parent"),
    ("reader", "agent", "service", "support-agent (MCP)", "reader", "parent"),
    ("operator", "operator", "person", "Omar (operator)", "operator", "root"),
    ("auditor", "auditor", "person", "Ada (auditor)", "auditor", "root"),
)


def _set_up(steps: Steps, w: World, corpus) -> None:
    from oml.client import OMLClient

    with steps.step("Admin creates workareas, identities and API keys (HTTP, Python client)") as s, \
            OMLClient(w.url, w.keys["admin"]) as admin:
        parent = admin.create_workarea(corpus.name, w.root)
        w.parent = parent.node_id
        for conv in corpus.conversations:
            w.workareas[conv.key] = admin.create_workarea(conv.key, w.parent).node_id
        listed = {r.node_id for r in admin.list_workareas().items}
        check({w.root, w.parent, *w.workareas.values()} <= listed, "GET /v1/workareas does not list the new workareas")
        identities: dict[str, str] = {}
        table = Table("key", "identity", "role", "roots")
        for name, ident, kind, display, role, roots in ROLES:
            if ident not in identities:
                identities[ident] = admin.create_identity(kind, display).identity_id
            node = w.parent if roots == "parent" else w.root
            made = admin.create_principal(identities[ident], role, [node])
            check(made.api_key, f"no API key returned for {name}")
            w.keys[name] = made.api_key
            table.add_row(name, ident, role, f"main.{corpus.name}" if roots == "parent" else "main")
        steps.console.print(table)
        s.outcome = (f"{2 + len(w.workareas)} workareas (main.{corpus.name} and one per conversation), "
                     f"{len(identities)} identities, {len(ROLES)} API keys")


def _write(steps: Steps, ctx, w: World, corpus, opts: Options) -> None:
    from oml.client import OMLClient, PersonalDataRefused
    from oml.client.models import ClaimIn

    with steps.step("Internal service writes claims (Python client, Idempotency-Key per batch)") as s, \
            OMLClient(w.url, w.keys["writer"]) as writer:
        steer = writer.submit(w.parent, {"statement": STEERING, "source": {"title": "demo operating instructions"}},
                              kind="steering", provenance="reported", idempotency_key=f"{w.tenant}/steering")
        w.steering = {"claim_id": steer.claim_id, "version_id": steer.version_id}
        batches: list[tuple[str, list, str, Any]] = []
        resent = 0
        with _bar(steps.console) as bar:
            task = bar.add_task("claims written", total=corpus.turns)
            for conv in corpus.conversations:
                wa = w.workareas[conv.key]
                for i in range(0, len(conv.turns), opts.batch):
                    chunk = conv.turns[i:i + opts.batch]
                    items = [ClaimIn(workarea_id=wa, body=_body(corpus, conv, t), kind="fact", provenance="observed")
                             for t in chunk]
                    key = f"{w.tenant}/{conv.key}/{chunk[0].locator}..{chunk[-1].locator}"
                    try:
                        got = writer.submit_batch(items, idempotency_key=key)
                        admitted = list(zip(chunk, got.items))
                        batches.append((key, items, conv.key, got))
                    except PersonalDataRefused:
                        # A batch is all or nothing: resend its turns one by one and keep the refusals.
                        resent += 1
                        admitted = []
                        for t, item in zip(chunk, items):
                            try:
                                one = writer.submit(wa, item.body, idempotency_key=f"{key}/{t.locator}")
                                admitted.append((t, one))
                            except PersonalDataRefused as exc:
                                kinds = sorted({f.get("kind", "?") for f in (getattr(exc, "findings", None) or [])})
                                w.refused.append((conv.key, t.locator, kinds))
                    for t, a in admitted:
                        w.claims[(conv.key, t.locator)] = {"claim_id": a.claim_id, "version_id": a.version_id}
                    bar.advance(task, len(chunk))
        check(len(w.claims) + len(w.refused) == corpus.turns, "some turns were neither admitted nor refused")
        check(len(w.claims) > 0, "no claim was admitted")
        # A retried request with the same Idempotency-Key answers the first response and appends nothing.
        if batches:
            key, items, conv_key, first = batches[0]
            head = _head(ctx, w.tenant)
            again = writer.submit_batch(items, idempotency_key=key)
            check(again.replayed, "the retried batch was not answered as a replay")
            check([a.claim_id for a in again.items] == [a.claim_id for a in first.items], "the replay answered other claim ids")
            check(_head(ctx, w.tenant) == head, "the replayed batch appended journal events")
            steps.console.print(f"retried batch {escape(repr(key))}: replayed, same {len(again.items)} claim ids, journal head unchanged at seq {head}")
        own = writer.own_work(status="held", limit=5)
        check(len(own.items) > 0, "GET /v1/own-work shows none of the writer's held claims")
        for conv_key, locator, kinds in w.refused:
            steps.console.print(f"[yellow]refused[/yellow] {conv_key} {escape(locator)}: admission.personal_data ({', '.join(kinds)})")
        w.counts.update(submitted=len(w.claims) + 1, refused_personal_data=len(w.refused), batches=len(batches))
        s.outcome = (f"{len(w.claims)} claims held from {len(batches) + resent} batch request(s) + 1 steering row in "
                     f"main.{corpus.name}"
                     + (f"; {resent} batch(es) refused for personal data and resent one by one, {len(w.refused)} turn(s) "
                        "refused" if resent else ""))


def _body(corpus, conv, t) -> dict:
    return {"statement": t.statement(), "speaker": t.speaker, "session": t.session, "session_date": t.date,
            "source": {"uri": f"{corpus.uri_prefix}{conv.key}/{t.locator}", "title": conv.title, "locator": t.locator},
            "tags": [corpus.name, conv.key]}


def _review(steps: Steps, w: World) -> None:
    from oml.client import OMLClient, SeparationOfDuties

    with steps.step("Reviewer promotes; the author's own promotion is refused") as s, \
            OMLClient(w.url, w.keys["service-reviewer"]) as self_reviewer, OMLClient(w.url, w.keys["reviewer"]) as reviewer:
        try:
            self_reviewer.promote(w.steering["version_id"], "accurate")
        except SeparationOfDuties as exc:
            check(exc.code == "access.separation_of_duties" and exc.status == 403, f"unexpected refusal {exc.code}")
            steps.console.print(f"the ingest service's own reviewer key promoting its own steering row → "
                                f"[red]{exc.code}[/red] ({exc.status}): {exc.detail}")
        else:
            raise DemoFailed("the author promoted its own claim outside a development workarea")
        expected = len(w.claims) + 1
        promoted = pages = 0
        with _bar(steps.console) as bar:
            task = bar.add_task("claims promoted", total=expected)
            after = None
            while True:
                page = reviewer.review_queue(limit=100, after=after)
                if not page.items:
                    break
                pages += 1
                for item in page.items:
                    check(not item.own, "the review queue offered the reviewer its own claim")
                    check(item.body and item.body.get("statement"), "a queued claim came without its decrypted body")
                    r = reviewer.promote(item.version_id, "accurate")
                    check(r.status == "promoted" and not r.self_signed, f"promotion of {item.version_id} answered {r.status}")
                    promoted += 1
                    bar.advance(task)
                after = page.next_after
                if after is None:
                    break
        check(promoted == expected, f"{promoted} promoted, expected {expected}")
        w.counts.update(promoted=promoted)
        s.outcome = f"{promoted} claims promoted from {pages} review-queue page(s); 1 self-promotion refused"


def _catch_up(steps: Steps, ctx, w: World, opts: Options, out: Path, title: str, checkpoint: bool = True) -> None:
    from oml.client import OMLClient

    with steps.step(title) as s:
        _wait_workers(steps.console, ctx, w.tenant, opts.catch_up_timeout)
        if checkpoint:
            with OMLClient(w.url, w.keys["operator"]) as operator, OMLClient(w.url, w.keys["auditor"]) as auditor:
                issued = operator.issue_checkpoint()
                kept = auditor.latest_checkpoint()
                check(kept.tree_size == issued.tree_size, "the auditor's latest checkpoint is not the one just issued")
                path = out / f"checkpoint-{kept.tree_size}.txt"
                path.write_text(kept.note, encoding="utf-8")
                w.reports["checkpoint_kept_by_auditor"] = str(path)
                s.outcome = f"lag 0 on both consumers; signed checkpoint at tree size {kept.tree_size} kept by the auditor"
        else:
            s.outcome = "lag 0 on both consumers"


def _wait_workers(console: Console, ctx, tenant: str, timeout: float) -> None:
    from oml.workers.runtime import lag

    deadline = time.monotonic() + timeout
    with _bar(console) as bar:
        tasks: dict[str, int] = {}
        while True:
            rows = lag.report(ctx, tenant=tenant)
            for r in rows:
                if r.consumer not in tasks:
                    tasks[r.consumer] = bar.add_task(f"{r.consumer:<11} cursor → journal head", total=r.head)
                bar.update(tasks[r.consumer], completed=r.cursor, total=r.head)
            if rows and all(r.lag == 0 for r in rows):
                return
            poisoned = [r for r in rows if r.poison]
            if poisoned or time.monotonic() > deadline:
                what = ", ".join(f"{r.consumer} at {r.cursor}/{r.head} ({r.poison} poison)" for r in rows)
                raise DemoFailed(("a consumer recorded poison messages: " if poisoned else "the workers did not catch up: ") + what)
            time.sleep(0.3)


def _start_agent(steps: Steps, ctx, w: World, settings, out: Path) -> McpAgent:
    with steps.step("Agent connects to `oml mcp` (MCP SDK client, stdio, reader key)") as s:
        env = dict(os.environ)
        env.update(OML_API_KEY=w.keys["reader"], OML_HOME=str(Path(settings.home).resolve()), HF_HUB_OFFLINE="1")
        for name, value in (("OML_DATABASE_URL", settings.database_url), ("OML_MASTER_KEY", settings.master_key),
                            ("OML_LAKE_URI", settings.lake_uri)):
            if value:
                env[name] = str(value)
        log = out / "mcp-server.log"
        agent = McpAgent(oml_command(), env, log).start()
        try:
            tools = agent.tools()
            check(tools >= {"recall", "fetch", "remember"}, f"the MCP server lists {sorted(tools)}")
        except BaseException:
            agent.close()
            raise
        w.reports["mcp_server_log"] = str(log)
        s.outcome = f"tools: {', '.join(sorted(tools))}"
        return agent


def _recall(steps: Steps, w: World, corpus, agent: McpAgent) -> None:
    with steps.step(f"Agent recalls real questions (hybrid retriever, top {TOP_K})") as s:
        found = asked = 0
        for conv in corpus.conversations:
            for q in conv.questions:
                out = agent.call("recall", {"query": q.text, "workarea_id": w.workareas[conv.key], "k": TOP_K})
                steering = out["steering"]
                check(steering and steering[0]["claim_id"] == w.steering["claim_id"],
                      "the steering row did not come first in the recall answer")
                hits = out["hits"]
                check(hits, f"no hit for a question about {conv.key}")
                for h in hits:
                    check(isinstance(h.get("source"), dict) and h["source"].get("locator"), "a hit came without its citation")
                    check(h["claim_id"] != w.steering["claim_id"], "the steering row was also ranked as a hit")
                locators = [h["source"]["locator"] for h in hits]
                hit_ev = [e for e in q.evidence if e in locators]
                asked += 1
                found += bool(hit_ev)
                w.recalls.append({"conversation": conv.key, "question": q.text, "evidence": list(q.evidence),
                                  "locators": locators, "claim_ids": [h["claim_id"] for h in hits]})
                _show_recall(steps.console, q, steering, hits, hit_ev)
        first = w.recalls[0]
        got = agent.call("fetch", {"claim_id": first["claim_ids"][0]})
        check(got.get("body", {}).get("source", {}).get("locator") == first["locators"][0], "fetch returned another claim")
        w.counts.update(questions=asked, questions_with_evidence_in_top_k=found)
        s.outcome = (f"{asked} questions: steering row first every time; {found} of {asked} had an evidence turn "
                     f"in the top {TOP_K} (measured in this run)")


def _show_recall(console: Console, q, steering: list, hits: list, hit_ev: list) -> None:
    console.print(f"\n[bold]Q:[/bold] {_short(q.text, 200)}  [dim](expected: {_short(q.answer, 60)}; "
                  f"evidence {escape(', '.join(q.evidence))})[/dim]")
    console.print(f"  [magenta]steering[/magenta] {_short(steering[0]['body']['statement'], 100)}")
    for i, h in enumerate(hits[:SHOWN_HITS], 1):
        mark = "[green]✓[/green]" if h["source"]["locator"] in q.evidence else " "
        console.print(f"  {i}. {mark} {h['score']:.4f} {escape('[' + h['source']['locator'] + ']')} "
                      f"{_short(h['body']['statement'], 95)}")
    if len(hits) > SHOWN_HITS:
        console.print(f"  [dim](the first {SHOWN_HITS} of {len(hits)} hits shown)[/dim]")
    if not hit_ev:
        console.print(f"  [yellow]evidence not in the top {len(hits)}[/yellow]")


def _erase(steps: Steps, ctx, w: World, opts: Options, agent: McpAgent, out: Path) -> None:
    from oml.client import OMLClient
    from oml.workers.lake import purge as lake_purge

    with steps.step("Operator erases one recalled claim and purges the lake; the agent no longer gets it") as s, \
            OMLClient(w.url, w.keys["operator"]) as operator:
        target = w.recalls[0]
        claim_id, locator = target["claim_ids"][0], target["locators"][0]
        res = operator.erase_claim(claim_id, "data_subject_request")
        check([e.claim_id for e in res.erasures] == [claim_id] and res.erasures[0].seq, "the erasure was not journalled")
        check(res.report, "the erasure answered without its report")
        seq = res.erasures[0].seq
        steps.console.print(f"erased claim {claim_id} ({escape(locator)}) at seq {seq}; lake ciphertext: "
                            f"{_class_status(res.report, 'lake_ciphertext')} until the lake purge runs")
        # `oml lake purge --force-now`: delete the rows, vacuum without the retention window, prove by listing storage.
        _wait_workers(steps.console, ctx, w.tenant, opts.catch_up_timeout)
        purged = lake_purge.purge(ctx, w.tenant, force_now=True)
        check(purged["status"] == "clean", f"the lake purge left erased ciphertext: {purged.get('listing', {}).get('dirty')}")
        steps.console.print(f"lake purge: {purged['rows_deleted']} row(s) deleted, {len(purged['vacuumed'])} file(s) vacuumed, "
                            f"storage listing clean through seq {purged['purged_through']}")
        report = operator.erasure_report(claim_id)
        html = operator.erasure_report(claim_id, format="html")
        check(isinstance(report, dict) and report.get("classes"), "GET the erasure report answered no copy classes")
        check(isinstance(html, str) and "<html" in html.lower(), "GET the erasure report as HTML failed")
        check(_class_status(report, "lake_ciphertext") == "complete", "the erasure report does not show the lake purged")
        stem = out / f"erasure-{seq}"
        Path(f"{stem}.json").write_text(json.dumps(report, indent=2, sort_keys=True, default=str))
        Path(f"{stem}.html").write_text(html, encoding="utf-8")
        w.reports.update(erasure_json=f"{stem}.json", erasure_html=f"{stem}.html")
        t = Table("copy", "status", "complete at")
        for c in report["classes"]:
            t.add_row(str(c.get("title")), str(c.get("status")), str(c.get("complete_at") or c.get("complete_when") or ""))
        steps.console.print(t)
        conv_key = target["conversation"]
        after = agent.call("recall", {"query": target["question"], "workarea_id": w.workareas[conv_key], "k": TOP_K})
        check(claim_id not in {h["claim_id"] for h in after["hits"] + after["steering"]}, "recall still returns the erased claim")
        try:
            agent.call("fetch", {"claim_id": claim_id})
        except ToolFailed as exc:
            refusal = exc.code
        else:
            raise DemoFailed("fetch still serves the erased claim")
        steps.console.print(f"the same question again over MCP: {len(after['hits'])} hits, none is {escape(locator)}; "
                            f"fetch → {refusal}")
        # The same reader key over HTTP (POST /v1/recall, GET /v1/claims/{id}) agrees.
        from oml.client import ClaimErased, NotFound

        with OMLClient(w.url, w.keys["reader"]) as reader:
            http = reader.recall(target["question"], workarea_id=w.workareas[conv_key], k=TOP_K)
            check(claim_id not in {m.claim_id for m in http.hits + http.steering}, "POST /v1/recall still returns the erased claim")
            try:
                reader.fetch_claim(claim_id)
            except (ClaimErased, NotFound) as exc:
                http_refusal = f"{exc.code} ({exc.status})"
            else:
                raise DemoFailed("GET /v1/claims/{id} still serves the erased claim")
        steps.console.print(f"and over HTTP with the reader key: POST /v1/recall without it; GET /v1/claims/{{id}} → {http_refusal}")
        w.erased = {"claim_id": claim_id, "locator": locator, "seq": seq,
                    "complete_everywhere_at": report.get("complete_everywhere_at"),
                    "pending": list(report.get("pending") or []) + list(report.get("attention") or [])}
        w.counts.update(erased=1)
        s.outcome = f"claim erased everywhere the report covers now (report {stem}.html); recall and fetch no longer serve it"


def _class_status(report: dict, key: str) -> str | None:
    return next((c.get("status") for c in report.get("classes") or [] if c.get("key") == key), None)


def _reconcile(steps: Steps, ctx, w: World, opts: Options, out: Path) -> None:
    from oml.workers.reconcile import reconciler

    with steps.step("Operator reconciles PostgreSQL, the lake and the chain (oml reconcile)") as s:
        _wait_workers(steps.console, ctx, w.tenant, opts.catch_up_timeout)
        result, info = reconciler.run(ctx, w.tenant, out_dir=out, trusted_fingerprint=w.fingerprint)
        w.reports.update(reconciliation_html=info["html"], reconciliation_json=info["json"])
        counts = {k: n for k, n in result.counts.items() if n}
        for d in [d for d in result.discrepancies if d.kind != "pending"][:10]:
            steps.console.print(f"  [red]{d.kind}[/red] {d.store}.{d.table} {escape(f'[{d.key}]')} {d.column or ''}: {escape(str(d.detail))}")
        steps.console.print(f"journal rows {result.postgres_rows} in PostgreSQL, {result.lake_rows} in the lake; "
                            f"{result.signatures_verified} signatures and {result.bodies_checked} bodies checked; "
                            f"discrepancies {counts or 'none'}")
        check(result.exit_code == 0, f"reconciliation found discrepancies: {counts}")
        check(result.anchored, "reconciliation was not anchored to the trust anchor")
        check(info["html"] and Path(info["html"]).is_file(), "no HTML report was written")
        w.counts.update(journal_events=result.head_seq)
        s.outcome = f"OK, anchored, exit status {result.exit_code}; digest journalled at seq {info['seq']}"


def _audit(steps: Steps, w: World, out: Path) -> None:
    from oml.client import OMLClient

    with steps.step("Auditor exports evidence (HTTP) and verifies it offline (oml evidence verify)") as s, \
            OMLClient(w.url, w.keys["operator"]) as operator, OMLClient(w.url, w.keys["auditor"], timeout=300) as auditor:
        size = operator.issue_checkpoint().tree_size
        prev = Path(w.reports["checkpoint_kept_by_auditor"])
        ex = auditor.export_evidence(1, size, previous_checkpoint=prev.read_text(encoding="utf-8"))
        archive = out / (ex.filename or f"oml-evidence-{w.tenant}-1-{size}.tar")
        archive.write_bytes(ex.data)
        w.reports["evidence_archive"] = str(archive)
        # Offline: a fresh process with no database, lake or key settings at all.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OML_")}
        cmd = [*oml_command(), "evidence", "verify", str(archive), "--trusted-key", w.fingerprint,
               "--previous-checkpoint", str(prev)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        lines = p.stdout.strip().splitlines()
        for line in [escape(ln) for ln in lines if not ln.startswith("  ok:")] + [f"  … {sum(ln.startswith('  ok:') for ln in lines)} checks ok"]:
            steps.console.print(f"  {line}")
        check(p.returncode == 0, f"oml evidence verify exited {p.returncode}: {(p.stderr or p.stdout).strip()[-300:]}")
        check(any(ln.startswith("ANCHORED") for ln in lines), "the verification is not ANCHORED")
        w.counts.update(evidence_events=size)
        s.outcome = f"archive of events 1..{size} ({len(ex.data)} bytes) VERIFIED and ANCHORED, exit status 0"


# ====================================================================== summary
def _summary(w: World, corpus, steps: Steps, home: Path, settings, seconds: float, failure: DemoFailed | None) -> dict:
    return {
        "ok": failure is None,
        "failure": str(failure) if failure else None,
        "tenant": w.tenant,
        "trust_anchor": w.fingerprint,
        "home": str(home),
        "database": "external (OML_DATABASE_URL)" if settings.database_url else "embedded",
        "url": w.url,
        "corpus": None if corpus is None else {"name": corpus.name, "source": corpus.source,
                                               "conversations": [c.key for c in corpus.conversations],
                                               "turns": corpus.turns, "questions": corpus.questions},
        "counts": w.counts,
        "steering": w.steering,
        "erased": w.erased,
        "recalls": w.recalls,
        "reports": dict(w.reports),
        "steps": [{"number": r.number, "title": r.title, "seconds": round(r.seconds, 3), "ok": r.ok, "outcome": r.outcome}
                  for r in steps.records],
        "seconds": round(seconds, 3),
    }


def _print_summary(console: Console, summary: dict, w: World, settings, home: Path) -> None:
    console.rule("[bold green]Summary", align="left")
    t = Table("#", "step", "seconds", show_edge=False)
    for r in summary["steps"]:
        t.add_row(str(r["number"]), r["title"], f"{r['seconds']:.1f}")
    t.add_row("", "[bold]total[/bold]", f"[bold]{summary['seconds']:.1f}[/bold]")
    console.print(t)
    c = summary["counts"]
    console.print(f"tenant [bold]{w.tenant}[/bold]: {c.get('submitted', 0)} claims written, {c.get('promoted', 0)} promoted, "
                  f"{c.get('refused_personal_data', 0)} refused (personal data), {c.get('questions', 0)} questions recalled over MCP, "
                  f"{c.get('erased', 0)} claim erased, {c.get('journal_events', 0)} journal events reconciled, "
                  f"{c.get('evidence_events', 0)} events in the verified evidence archive")
    # Paths, keys and commands are printed unwrapped (soft_wrap): a narrow or non-terminal console must not
    # split what is meant to be copied.
    console.print("[bold]reports[/bold]")
    for name, path in summary["reports"].items():
        console.print(f"  {name.replace('_', ' ')}: {path}", soft_wrap=True)
    keys = home / "demo" / w.tenant / "keys.env"
    _write_keys(keys, w)
    from oml.services.runtime.home import find_home

    # No OML_HOME= prefix when a shell in this folder finds the same home by itself (services/runtime/home.py).
    env = "" if find_home(env={}).path == Path(home).resolve() else f"OML_HOME={home} "
    ext = "  (with the same OML_DATABASE_URL and OML_MASTER_KEY)" if settings.database_url else ""
    oml = _runnable(oml_command())
    console.print("[bold]keep it running[/bold]")
    console.print(f"  {env}{oml} serve{ext}", soft_wrap=True)
    console.print(f"    HTTP API on {settings.http_host}:{settings.http_port} with the workers in-process (or: {env}make serve)")
    console.print("[bold]point an agent at it[/bold] (MCP over stdio; the reader key of this tenant)")
    # The key is read from the 0600 file, never printed: a terminal's scrollback and a CI log are not secret stores.
    console.print(f"  {env}OML_API_KEY=\"$(sed -n 's/^OML_READER_KEY=//p' {keys})\" {oml} mcp", soft_wrap=True, markup=False)
    console.print(f"  all of this run's API keys: {keys} (mode 0600); trust anchor {w.fingerprint}, recorded in "
                  f"{w.anchors}", soft_wrap=True)
    console.print("[bold green]demo OK[/bold green]: every step did what it should")


def _runnable(command: list[str]) -> str:
    """``oml`` when PATH finds this same script, else its path (relative to here when shorter): ``.venv/bin/oml``."""
    import shutil

    if len(command) != 1:
        return " ".join(command)
    script = Path(command[0]).resolve()
    found = shutil.which("oml")
    if found and Path(found).resolve() == script:
        return "oml"
    rel = os.path.relpath(script)
    return rel if len(rel) < len(str(script)) else str(script)


def _write_keys(path: Path, w: World) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"# OML demo tenant {w.tenant}: API keys (secrets; shown once by the server)\n")
        for name, key in w.keys.items():
            f.write(f"OML_{name.upper().replace('-', '_')}_KEY={key}\n")
        f.write(f"OML_TRUST_ANCHOR={w.fingerprint}\n")


def _serve_until_interrupted(console: Console, server: LocalServer) -> None:
    console.print(f"[bold]--keep[/bold]: serving {server.url} with the workers until Ctrl-C")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        console.print("stopping")
