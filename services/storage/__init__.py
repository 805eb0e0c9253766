"""Storage: SQLAlchemy engines per workload role, tenant binding, migrations, embedded PostgreSQL."""
