"""a rate limit per API key; the server process holding an Idempotency-Key claim

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('api_keys') as batch:
        batch.add_column(sa.Column('rate_limit_per_s', sa.Float(), nullable=True))
    with op.batch_alter_table('idempotency_reservations') as batch:
        batch.add_column(sa.Column('owner', sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('idempotency_reservations') as batch:
        batch.drop_column('owner')
    with op.batch_alter_table('api_keys') as batch:
        batch.drop_column('rate_limit_per_s')
