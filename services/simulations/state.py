"""Whether a principal is in a simulation's audience, and whether the simulation is open."""
from __future__ import annotations

import sqlalchemy as sa

from oml.domain.access import Principal


def simulation_state(conn: sa.Connection, p: Principal, simulation_id: str) -> str | None:
    """``"open"`` or ``"closed"`` when ``p`` is in the simulation's audience; ``None`` when it is not (or no such
    simulation): to a key outside the audience a simulation does not exist (docs/simulations.md)."""
    row = conn.execute(sa.text("SELECT closed_seq FROM simulations WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"
                               " AND :p = ANY(audience)"), {"t": p.tenant, "s": simulation_id, "p": p.principal_id}).one_or_none()
    if row is None:
        return None
    return "open" if row.closed_seq is None else "closed"
