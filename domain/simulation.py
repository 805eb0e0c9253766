"""Simulation rules: taint, overlay tips, refusals (docs/design.md §Simulations; docs/simulations.md, "Tips").

Pure functions over plain values; no I/O. ``docs/simulations.md`` has the long form.

* **Taint.** A version is *simulation material* (tainted) when it is written
  inside a simulation, when its claim was born inside one, when it
  supersedes a tainted version, or when one of its ``derived_from`` claims
  was born inside one. A claim born from tainted material is itself a
  simulation claim (``claims.simulation_id``), so taint reaches any depth of
  ``derived_from`` through that one column. Material from two simulations
  never mixes (``simulation.mixed``).
* **Version numbers.** A real claim's counter counts untainted versions
  only, so nothing a simulation does moves the number a key outside the
  audience sees. Inside a simulation a claim's versions continue one counter
  over the real versions and that simulation's own; tainted numbers may
  therefore repeat a later real number (they are told apart by provenance
  and simulation).
* **Tips.** The default tip never considers a tainted version
  (:func:`oml.domain.claims.tip_after_demotion` skips them). Promoting a
  tainted version records a *simulation tip* (``sim_tip_intervals``): for a
  real claim it is the **overlay tip** that shadows the default tip for the
  audience; for a claim born in the simulation it is its only tip. A reader
  in several audiences sees, per claim, the most recently opened overlay
  (:func:`overlay_winner`).
* **Refusals** (``simulation.tip_refused``, 409): promoting a tainted
  version whose simulation is closed (there is no fence left to hold it, so
  it could only become a default tip), and any ``claim.promoted`` of a
  tainted version that is not marked as a simulation tip
  (:func:`check_default_promotion`, enforced by the projector itself).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import OMLError, invalid

NAME_MAX = 200
AUDIENCE_MAX = 256
KEY_ID = re.compile(r"^[0-9a-f]{16}$")
#: Roles that may open and close simulations (domain/claims.py ROLE_ACTS, act ``simulation``).
OPENER_ROLES = ("admin", "operator")
SIM_INDEX_TABLES = ("sim_memories_fts", "sim_memory_embeddings")


def tip_refused(detail: str = "a simulation-tainted version cannot become a default tip") -> OMLError:
    return OMLError("simulation.tip_refused", detail, 409)


def simulation_not_found() -> OMLError:
    """The one answer to a key outside the audience: the simulation does not exist for it."""
    return OMLError("simulation.not_found", "simulation not found", 404)


# ---------------------------------------------------------------- acts' inputs


def check_name(name: object) -> str:
    """A simulation's name: 1–200 characters, no NUL. It goes into an encrypted note, never the journal."""
    if not isinstance(name, str) or not name.strip():
        raise invalid("name must be a non-empty string", field="name")
    if len(name) > NAME_MAX or "\x00" in name:
        raise invalid(f"name must be at most {NAME_MAX} characters without NUL", field="name")
    return name


def check_audience(audience: object) -> list[str]:
    """The audience: 1–256 distinct principal ids (16 hex each); returned sorted (the journal's order)."""
    if not isinstance(audience, (list, tuple, set, frozenset)) or not audience:
        raise invalid("audience must be a non-empty list of principal ids", field="audience")
    if len(audience) > AUDIENCE_MAX:
        raise invalid(f"audience must name at most {AUDIENCE_MAX} principals", field="audience")
    out = []
    for i, p in enumerate(audience):
        if not isinstance(p, str) or not KEY_ID.match(p):
            raise invalid("each audience member must be a principal id (16 hex)", field=f"audience[{i}]")
        out.append(p)
    return sorted(set(out))


# ---------------------------------------------------------------- taint


def taint_of(*, explicit: str | None, claim_simulation: str | None = None,
             supersedes_simulation: str | None = None, derived_simulations: Iterable[str | None] = ()) -> str | None:
    """The simulation a new version belongs to, or ``None`` for a real (untainted) version.

    ``explicit`` is the simulation the write names; ``claim_simulation`` the
    simulation the claim was born in (for a new version of an existing
    claim); ``supersedes_simulation`` that of the superseded version;
    ``derived_simulations`` those of each ``derived_from`` claim.
    Raises ``simulation.mixed`` (422) when they name two simulations.
    """
    sims = {s for s in (explicit, claim_simulation, supersedes_simulation, *derived_simulations) if s is not None}
    if len(sims) > 1:
        raise OMLError("simulation.mixed", "a version cannot combine material from two simulations", 422)
    return next(iter(sims), None)


def next_version_no(existing: Iterable[tuple[int, bool, str | None]], simulation: str | None) -> int:
    """The number of a new version of an existing claim.

    ``existing`` holds ``(version_no, tainted, simulation_id)`` of the
    claim's versions. A real version counts only real versions; a version of
    simulation S counts the real versions and S's own.
    """
    nums = [n for n, tainted, sim in existing if not tainted or (simulation is not None and sim == simulation)]
    return (max(nums) if nums else 0) + 1


# ---------------------------------------------------------------- tips


@dataclass(frozen=True)
class SimTip:
    """An open (or, for ``as_of``, then-current) simulation tip of one claim."""

    simulation_id: str
    claim_id: str
    version_id: str
    from_seq: int


def overlay_winner(tips: Iterable[SimTip]) -> SimTip | None:
    """The simulation tip a reader in several audiences sees for one claim: the latest ``from_seq``, then the
    larger simulation id (deterministic; two simulations never tip at the same seq)."""
    best: SimTip | None = None
    for t in tips:
        if best is None or (t.from_seq, t.simulation_id) > (best.from_seq, best.simulation_id):
            best = t
    return best


def resolve_tip(default_tip: str | None, tips: Iterable[SimTip]) -> str | None:
    """The tip of one claim as a reader sees it: its visible simulation tip shadows the default tip."""
    w = overlay_winner(tips)
    return w.version_id if w is not None else default_tip


@dataclass(frozen=True)
class SimVersion:
    version_id: str
    version_no: int
    status: str
    simulation_id: str | None


def sim_tip_after_demotion(versions: Iterable[SimVersion], demoted: str, simulation: str) -> str | None:
    """The version that becomes the simulation tip when ``demoted`` (the current one) is demoted: the highest
    numbered other promoted version of that simulation, or ``None`` (the default tip shows through again)."""
    best: SimVersion | None = None
    for v in versions:
        if v.version_id == demoted or v.status != "promoted" or v.simulation_id != simulation:
            continue
        if best is None or v.version_no > best.version_no:
            best = v
    return best.version_id if best else None


def check_overlay_promotion(*, simulation_open: bool) -> None:
    """A tainted version may be promoted only as a simulation tip of an open simulation.

    Raises ``simulation.tip_refused`` (409) when the simulation is closed.
    """
    if not simulation_open:
        raise tip_refused("the version's simulation is closed: promoting it could only make it a default tip")


def check_default_promotion(*, tainted: bool, overlay: bool) -> None:
    """The projector's own guard: a tainted version never opens a default tip interval.

    Raises ``simulation.tip_refused`` (409) for a promotion of a tainted
    version not marked ``overlay`` (a forged or buggy event), and for an
    ``overlay`` promotion of an untainted version.
    """
    if tainted and not overlay:
        raise tip_refused()
    if overlay and not tainted:
        raise tip_refused("only simulation-tainted versions are promoted as simulation tips")


def close_demotions(promoted: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The ``demoted`` member of ``simulation.closed``: every promoted version of the simulation,
    ``[{"claim_id", "version_id"}]`` sorted by claim then version (ids only)."""
    return [{"claim_id": c, "version_id": v} for c, v in sorted(set(promoted))]


def partition_name(table: str, simulation_id: str) -> str:
    """The name of a simulation's partition of ``table``: ``<table>_s<32 hex>`` (at most 54 characters)."""
    if table not in SIM_INDEX_TABLES:
        raise ValueError("not a simulation index table")
    hexid = simulation_id.replace("-", "")
    if not re.fullmatch(r"[0-9a-f]{32}", hexid):
        raise ValueError("simulation id must be a lowercase UUID")
    return f"{table}_s{hexid}"
