"""The smoke suite of an installed OML: what a user of the wheel (or the image) runs first, run as they would.

    python tests/smoke/smoke.py            # with the interpreter of the installation under test

Needs only the standard library and the installed ``oml`` (no pytest, no
clone): tools/wheel-smoke.sh runs it in a fresh virtualenv holding the
built wheel, and in the image built from deploy/Dockerfile (fed on stdin).

1. The installation is not the clone: ``oml`` is imported from site-packages.
2. ``oml --version`` names the commit the package was built from.
3. Every ``oml`` command answers ``--help``: the Typer app's command tree is
   walked, hidden commands included, so a new command is covered without
   editing this file.
4. A short real path on the embedded defaults, in a temporary ``OML_HOME``:
   tenant create → (HTTP, Python client) identities and keys, write, review
   → index catch-up → recall → reconcile → evidence export → evidence verify
   (no OML settings, trust anchor given) → erase → recall again.

Exit status 0 when every step passed; 1 with the failing step's name and
output otherwise. The embedded PostgreSQL started under the temporary home
is stopped at the end either way.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

OML = [sys.executable, "-m", "oml.services.entrypoints.cli.main"]
STATEMENT = "The smoke suite's deploy window opens on Tuesdays at 14:00 UTC."
SERVE_TIMEOUT_S = 180


class SmokeFailed(Exception):
    pass


def step(name: str):
    def wrap(fn):
        def run(*a, **k):
            t0 = time.monotonic()
            try:
                out = fn(*a, **k)
            except Exception as exc:
                raise SmokeFailed(f"{name}: {exc}") from exc
            print(f"ok   {name} ({time.monotonic() - t0:.1f} s)", flush=True)
            return out
        return run
    return wrap


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without any OML_* setting, the home set, downloads off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OML_")}
    env.update(OML_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env


def oml(args: list[str], env: dict[str, str], cwd: Path, expect: int = 0, stdin: str | None = None) -> str:
    r = subprocess.run([*OML, *args], env=env, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=600)
    if r.returncode != expect:
        raise SmokeFailed(f"`oml {' '.join(args)}` exited {r.returncode} (expected {expect})\n"
                          f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}")
    return r.stdout


@step("the installation is not the clone")
def not_the_clone() -> None:
    import oml.services

    where = Path(list(oml.services.__path__)[0]).resolve()
    if "site-packages" not in where.parts and "dist-packages" not in where.parts:
        raise SmokeFailed(f"oml.services is imported from {where}, not from an installed package")


@step("oml --version names the build's commit")
def version(env: dict[str, str], cwd: Path) -> None:
    out = oml(["--version"], env, cwd).strip()
    if not out.startswith("oml ") or "(commit " not in out:
        raise SmokeFailed(f"`oml --version` printed {out!r}: no commit recorded at build time")
    print(f"     {out}")


@step("every oml command answers --help")
def helps(env: dict[str, str], cwd: Path) -> None:
    from typer.main import get_command
    from typer.testing import CliRunner

    from oml.services.entrypoints.cli.main import app

    def walk(cmd, path: list[str]):  # a group has .commands (typer's own click, not necessarily the click package)
        yield path
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    oml(["--help"], env, cwd)  # the console entry point itself, in a process of its own
    root = get_command(app)
    runner = CliRunner()
    paths = list(walk(root, []))
    for path in paths:
        r = runner.invoke(app, [*path, "--help"], env=env, catch_exceptions=True)
        if r.exit_code != 0 or "Usage:" not in r.output:
            raise SmokeFailed(f"`oml {' '.join(path)} --help` exited {r.exit_code}: {r.output[-2000:]} {r.exception!r}")
    if len(paths) < 20:
        raise SmokeFailed(f"only {len(paths)} commands found: the walk of the command tree is broken")
    print(f"     {len(paths)} commands and groups")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@step("oml serve answers /healthz")
def serve(env: dict[str, str], cwd: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*OML, "serve", "--no-workers", "--port", str(port)], env=env, cwd=cwd,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SmokeFailed(f"oml serve exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    raise SmokeFailed(f"oml serve did not answer within {SERVE_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")


@step("admin creates identities and keys (HTTP, Python client)")
def set_up(url: str, tenant: dict) -> dict[str, str]:
    from oml.client import OMLClient

    keys = {}
    with OMLClient(url, tenant["admin_key"]) as admin:
        for name, kind in (("writer", "service"), ("reviewer", "person"), ("reader", "service"),
                           ("operator", "person"), ("auditor", "person")):
            ident = admin.create_identity(kind, f"smoke {name}").identity_id
            keys[name] = admin.create_principal(ident, name, [tenant["root_workarea"]]).api_key
    return keys


@step("writer writes, reviewer promotes (HTTP, Python client)")
def write_review(url: str, tenant: dict, keys: dict[str, str]) -> dict[str, str]:
    from oml.client import OMLClient

    with OMLClient(url, keys["writer"]) as writer, OMLClient(url, keys["reviewer"]) as reviewer:
        got = writer.submit(tenant["root_workarea"], {"statement": STATEMENT}, kind="fact", provenance="observed",
                            idempotency_key="smoke/1")
        r = reviewer.promote(got.version_id, "accurate")
        if r.status != "promoted":
            raise SmokeFailed(f"promotion answered {r.status}")
    return {"claim_id": got.claim_id, "version_id": got.version_id}


def recalled(env: dict[str, str], cwd: Path, key: str) -> set[str]:
    out = json.loads(oml(["recall", "deploy window Tuesday", "--json", "-k", "5"], env | {"OML_API_KEY": key}, cwd))
    return {h["claim_id"] for h in out["hits"]}


def main() -> int:
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="oml-smoke-"))
    home = work / "home"
    env = clean_env(home)
    server = None
    try:
        not_the_clone()
        version(env, work)
        helps(env, work)
        tenant = step("oml tenant create (embedded PostgreSQL, migrations)")(
            lambda: json.loads(oml(["tenant", "create", "smoke", "--json"], env, work)))()
        server, url = serve(env, work, work / "serve.log")
        keys = set_up(url, tenant)
        claim = write_review(url, tenant, keys)
        step("oml index catch-up, oml lake catch-up")(lambda: (oml(["index", "catch-up", "-t", "smoke"], env, work),
                                                             oml(["lake", "catch-up", "-t", "smoke"], env, work)))()

        @step("oml recall finds the promoted claim")
        def recall_finds() -> None:
            if claim["claim_id"] not in recalled(env, work, keys["reader"]):
                raise SmokeFailed("the promoted claim is not among the hits")
        recall_finds()
        step("oml reconcile")(lambda: oml(["reconcile", "-t", "smoke", "-o", str(work / "reports")], env, work))()
        archive = work / "evidence.tar"
        step("oml evidence export (auditor key)")(
            lambda: oml(["evidence", "export", "-t", "smoke", "-o", str(archive)], env | {"OML_API_KEY": keys["auditor"]}, work))()
        bare = {k: v for k, v in os.environ.items() if not k.startswith("OML_")}
        step("oml evidence verify (offline, no OML settings)")(
            lambda: oml(["evidence", "verify", str(archive), "--trusted-key", tenant["fingerprint"]], bare, work))()

        @step("oml erase claim, and recall no longer serves it")
        def erase() -> None:
            oml(["erase", "claim", claim["claim_id"], "--reason", "data_subject_request", "--report-dir", str(work / "reports")],
                env | {"OML_API_KEY": keys["operator"]}, work)
            if claim["claim_id"] in recalled(env, work, keys["reader"]):
                raise SmokeFailed("the erased claim is still recalled")
        erase()
    except SmokeFailed as exc:
        print(f"FAILED {exc}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        _stop_embedded(home)
        shutil.rmtree(work, ignore_errors=True)
    print(f"smoke suite passed in {time.monotonic() - t0:.0f} s")
    return 0


def _stop_embedded(home: Path) -> None:
    """Stop the embedded PostgreSQL the commands started under ``home`` (it outlives them by design)."""
    pid_file = home / "pg" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        if not pid_file.exists():
            return
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
