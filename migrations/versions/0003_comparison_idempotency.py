"""comparisons accept an Idempotency-Key

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('comparisons', schema=None) as batch_op:
        batch_op.add_column(sa.Column('idempotency_key', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('request_digest', sa.String(length=80), nullable=True))
        batch_op.create_unique_constraint(batch_op.f('uq_comparisons_project_id'), ['project_id', 'idempotency_key'])


def downgrade() -> None:
    with op.batch_alter_table('comparisons', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('uq_comparisons_project_id'), type_='unique')
        batch_op.drop_column('request_digest')
        batch_op.drop_column('idempotency_key')
