"""Alembic environment: runs against the owner URL passed in the config."""
import sqlalchemy as sa
from alembic import context

config = context.config
url = config.get_main_option("sqlalchemy.url")
engine = sa.create_engine(url)
with engine.connect() as connection:
    context.configure(connection=connection, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
