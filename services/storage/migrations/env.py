"""Alembic environment: runs against the owner URL passed in the config."""
import sqlalchemy as sa
from alembic import context

config = context.config
url = config.get_main_option("sqlalchemy.url")
engine = sa.create_engine(url)
with engine.connect() as connection:
    # migrate.upgrade passes a callback that collects the revisions applied, to log them once committed.
    context.configure(connection=connection, transactional_ddl=True,
                      on_version_apply=config.attributes.get("on_version_apply", ()))
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
