"""Whether a principal is in a simulation's audience, and whether the simulation is open."""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from oml.domain.access import Principal
from oml.services.journal import verified_state


def _differs(simulation_id: str, principal_id: str, row: Any) -> Any:
    """``differs`` for :meth:`verified_state.VerifiedStates.check`: the row's audience membership and open/closed
    state against the simulation's verified ``simulation.opened`` / ``simulation.closed``."""
    def differs(s: verified_state.TenantState) -> str | None:
        v = s.simulations.get(simulation_id)
        in_audience = v is not None and principal_id in v["audience"]
        if row is None:
            return None  # nothing is acted on: to this key the simulation does not exist
        if not in_audience or (v["closed_seq"] is None) != (row.closed_seq is None):
            return f"simulation {simulation_id}"
        return None
    return differs


def simulation_state(conn: sa.Connection, p: Principal, simulation_id: str) -> str | None:
    """``"open"`` or ``"closed"`` when ``p`` is in the simulation's audience; ``None`` when it is not (or no such
    simulation): to a key outside the audience a simulation does not exist (docs/simulations.md).

    The row is compared with the verified journal (a ``closed_seq`` cleared in the row alone would reopen a closed
    simulation for writes): ``integrity.unverified_state`` (500) when they differ."""
    row = conn.execute(sa.text("SELECT closed_seq FROM simulations WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"
                               " AND :p = ANY(audience)"), {"t": p.tenant, "s": simulation_id, "p": p.principal_id}).one_or_none()
    states = verified_state.for_conn(conn)
    if states is not None:
        states.check(conn, p.tenant, _differs(simulation_id, p.principal_id, row))
    if row is None:
        return None
    return "open" if row.closed_seq is None else "closed"
