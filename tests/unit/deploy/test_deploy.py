"""Static checks of deploy/: no Docker engine runs here, so the compose file is read as data.

Each workload runs as its own service with its own database role and only
its own secrets; every long-running service has a healthcheck; the image
copies files that exist and runs as a non-root user; every workload the
entrypoint names maps to a real ``oml`` command; PostgreSQL is configured
never to log statement text or parameters.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest
import typer
import yaml

from oml.services.runtime.settings import Settings
from oml.services.storage.db import WORKLOAD_ROLES
from oml.services.storage.embedded import LOG_SETTINGS

from support.paths import REPO

DEPLOY = REPO / "deploy"
VAR = re.compile(r"\$\{([A-Z0-9_]+)(?:[:?\-][^}]*)?\}")

# Which services may see each secret, exactly.
SECRETS: dict[str, set[str]] = {
    "POSTGRES_PASSWORD": {"postgres"},
    "OML_OWNER_DB_PASSWORD": {"postgres", "migrate"},
    "OML_ADMISSION_DB_PASSWORD": {"postgres", "api", "mcp"},
    "OML_SERVER_DB_PASSWORD": {"postgres", "api", "mcp"},
    "OML_LAKE_WRITER_DB_PASSWORD": {"postgres", "lake-writer"},
    # The api reads as oml_reconciler and oml_relay for erasure reports and /metrics.
    "OML_RECONCILER_DB_PASSWORD": {"postgres", "reconciler", "api"},
    "OML_INDEXER_DB_PASSWORD": {"postgres", "indexer"},
    "OML_RELAY_DB_PASSWORD": {"postgres", "relay", "api"},
    # The MCP server runs recall and remember in process: it needs the KeyStore too.
    "OML_MASTER_KEY": {"api", "mcp"},
    "OML_METRICS_TOKEN": {"api"},
    "OML_REDIS_PASSWORD": {"redis", "relay", "lake-writer", "indexer"},
    "MINIO_ROOT_USER": {"minio", "minio-init"},
    "MINIO_ROOT_PASSWORD": {"minio", "minio-init"},
    "OML_LAKE_WRITER_S3_KEY": {"minio-init", "lake-writer"},
    "OML_LAKE_WRITER_S3_SECRET": {"minio-init", "lake-writer"},
    "OML_RECONCILER_S3_KEY": {"minio-init", "reconciler"},
    "OML_RECONCILER_S3_SECRET": {"minio-init", "reconciler"},
    "OML_API_S3_KEY": {"minio-init", "api"},
    "OML_API_S3_SECRET": {"minio-init", "api"},
}
# The database roles each OML workload logs in as (keys of OML_ROLE_PASSWORDS).
ROLES = {
    "api": {"oml_admission", "oml_server", "oml_reconciler", "oml_relay"},
    "relay": {"oml_relay"},
    "lake-writer": {"oml_lake_writer"},
    "indexer": {"oml_indexer"},
    "reconciler": {"oml_reconciler"},
    "mcp": {"oml_admission", "oml_server"},
}
ONE_SHOT = {"migrate", "minio-init"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict]:
    return compose["services"]


def _refs(value) -> set[str]:
    """Every ${VAR} a service's definition interpolates."""
    return set(VAR.findall(yaml.safe_dump(value)))


def _env(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def _fill(text: str) -> str:
    return VAR.sub("x", text)


def test_every_service_has_an_image_and_a_healthcheck(services):
    assert set(ROLES) | ONE_SHOT | {"postgres", "redis", "minio"} <= set(services)
    for name, svc in services.items():
        assert svc.get("image") or svc.get("build"), name
        hc = svc.get("healthcheck") or {}
        if name in ONE_SHOT:
            assert svc.get("restart") == "no", name
            continue
        assert hc.get("test") and not hc.get("disable"), f"{name} needs a healthcheck"
        assert svc.get("restart") in ("unless-stopped", "always"), name


def test_dependencies_exist_and_workers_wait_for_what_they_use(services):
    for name, svc in services.items():
        for dep in (svc.get("depends_on") or {}):
            assert dep in services, (name, dep)
    for name in ("relay", "lake-writer", "indexer"):
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    for name in ("lake-writer", "reconciler", "api"):
        assert services[name]["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    for name in set(ROLES):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_oml_services_build_this_repository(services):
    for name in set(ROLES) | {"migrate"}:
        build = services[name]["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
        assert services[name]["image"].startswith("oml:")


def test_each_secret_reaches_exactly_its_services(services):
    seen: dict[str, set[str]] = {}
    for name, svc in services.items():
        for var in _refs(svc):
            seen.setdefault(var, set()).add(name)
    for secret, allowed in SECRETS.items():
        assert seen.get(secret, set()) == allowed, f"{secret}: {sorted(seen.get(secret, set()))} != {sorted(allowed)}"
    unknown = {v for v in seen if re.search(r"PASSWORD|SECRET|MASTER|TOKEN|_KEY$", v)} - set(SECRETS)
    assert not unknown, f"unclassified secrets: {unknown}"


KEY_HOLDERS = {"api", "mcp"}


def test_only_the_serving_processes_hold_the_keystore(services):
    for name, svc in services.items():
        vols = [str(v) for v in svc.get("volumes", [])]
        keys = [v for v in vols if v.startswith("keystore:")]
        assert bool(keys) == (name in KEY_HOLDERS), name
        assert ("OML_MASTER_KEY" in _env(svc)) == (name in KEY_HOLDERS), name
        if name == "mcp":
            assert all(v.endswith(":ro") for v in keys)  # it reads keys, never writes them
    # The keyless workers: no key, no server role (which can read wrapped DEKs).
    for name in ("relay", "lake-writer", "indexer", "reconciler"):
        assert "oml_server" not in ROLES[name] and "OML_MASTER_KEY" not in _env(services[name])


def test_each_workload_has_its_own_database_role(services):
    for name, roles in ROLES.items():
        env = _env(services[name])
        got = set(json.loads(_fill(env["OML_ROLE_PASSWORDS"]))) if "OML_ROLE_PASSWORDS" in env else set()
        assert got == roles, name
        assert got <= set(WORKLOAD_ROLES)
        if roles:
            # Workloads never migrate and never hold the owner's password.
            assert env["OML_AUTO_MIGRATE"] == "false", name
            assert ":" not in env["OML_DATABASE_URL"].split("//", 1)[1].split("@", 1)[0], name
    keyless = [frozenset(ROLES[n]) for n in ("relay", "lake-writer", "indexer", "reconciler")]
    assert len(keyless) == len(set(keyless)) and all(len(r) == 1 for r in keyless)
    assert set().union(*ROLES.values()) == set(WORKLOAD_ROLES)


def test_each_health_check_logs_in_as_every_role_its_service_holds(services):
    """A planted role setting fails the health check of every service that holds the role (services/runtime/healthcheck.py)."""
    for name, roles in ROLES.items():
        test = services[name]["healthcheck"]["test"]
        checked = {test[i + 1] for i, a in enumerate(test) if a == "--role"}
        assert checked == roles, name


def test_settings_parse_the_compose_environment(services, monkeypatch):
    for name in ROLES:
        env = _env(services[name])
        for k in list(env):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            # The master key is checked for shape when the settings load: a 64-hex stand-in.
            monkeypatch.setenv(k, "00" * 32 if k == "OML_MASTER_KEY" else _fill(v))
        s = Settings()
        assert set(s.role_passwords) == ROLES[name]
        if "OML_LAKE_STORAGE_OPTIONS" in env:
            assert s.lake.startswith("s3://") and s.lake_storage_options["AWS_ENDPOINT_URL"].startswith("http")
        for k in env:
            monkeypatch.delenv(k, raising=False)


def test_postgres_never_logs_statements_or_parameters(services):
    cmd = services["postgres"]["command"]
    given = dict(a.split("=", 1) for a in cmd if "=" in a)
    for name, value in LOG_SETTINGS.items():
        assert given.get(name) == value, f"compose postgres must set {name}={value}"


def test_init_script_creates_every_role():
    text = (DEPLOY / "postgres" / "10-oml-roles.sh").read_text()
    for role in (*WORKLOAD_ROLES, "oml_owner"):
        assert re.search(rf"CREATE ROLE {role}\s+LOGIN NOSUPERUSER", text), role
    assert "NOBYPASSRLS" in text


@pytest.mark.parametrize("script", ["entrypoint.sh", "gen-secrets.sh", "postgres/10-oml-roles.sh", "minio/init.sh"])
def test_shell_scripts_parse(script):
    subprocess.run(["sh", "-n", str(DEPLOY / script)], check=True)


def test_dockerfile_copies_real_files_and_drops_root():
    lines = [ln.strip() for ln in (DEPLOY / "Dockerfile").read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    assert any("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in ln for ln in lines)
    assert any(ln.startswith("RUN pip install .") for ln in lines)
    for ln in lines:
        if ln.startswith("COPY"):
            for src in shlex.split(ln)[1:-1]:
                assert (REPO / src).exists(), src
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert (DEPLOY / "Dockerfile.dockerignore").exists()


def _entrypoint() -> str:
    return (DEPLOY / "entrypoint.sh").read_text()


def _workloads() -> set[str]:
    """The case labels of deploy/entrypoint.sh."""
    return set(re.findall(r"^\s*([a-z-]+)\)\s", _entrypoint(), re.M))


def _oml_invocations() -> list[list[str]]:
    """Every ``oml …`` command line the entrypoint runs, ${VAR:-default} replaced by the default."""
    out = []
    for m in re.finditer(r"(?:^|exec |\s)(oml [a-z][^|;\n]*)", _entrypoint(), re.M):
        text = re.sub(r"\"\$\{[A-Z_]+:-([^}]*)\}\"", r"\1", m.group(1)).replace('"$@"', "")
        out.append(shlex.split(re.sub(r'"\$[a-z_]+"', "X", text)))
    return out


def test_compose_commands_are_entrypoint_workloads(services):
    workloads = _workloads()
    for name in set(ROLES) | {"migrate"}:
        assert services[name]["command"][0] in workloads, name
    for svc in services.values():
        test = (svc.get("healthcheck") or {}).get("test") or []
        if "oml-entrypoint" in test:
            assert test[test.index("oml-entrypoint") + 1] in workloads


def test_entrypoint_workloads_name_real_commands():
    from oml.services.entrypoints.cli.main import app

    root = typer.main.get_command(app)
    invocations = _oml_invocations()
    assert len(invocations) >= 6
    for argv in invocations:
        cmd = root  # typer vendors click: duck-type groups by their ``commands``
        args = argv[1:]
        while hasattr(cmd, "commands") and args and not args[0].startswith("-"):
            assert args[0] in cmd.commands, f"`{' '.join(argv)}` — no command {args[0]!r}"
            cmd, args = cmd.commands[args[0]], args[1:]
        opts = {o for p in cmd.params for o in p.opts + p.secondary_opts}
        for a in args:
            if a.startswith("--"):
                assert a.split("=", 1)[0] in opts, f"`{' '.join(argv)}`: {cmd.name} has no option {a}"
