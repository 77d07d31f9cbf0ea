"""a claim per Idempotency-Key while its request creates the resource

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'idempotency_reservations',
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('scope', sa.String(length=20), nullable=False),
        sa.Column('key', sa.String(length=200), nullable=False),
        sa.Column('request_digest', sa.String(length=80), nullable=False),
        sa.Column('reserved_until', sa.DateTime(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['project_id'], ['projects.id'],
                                name=op.f('fk_idempotency_reservations_project_id_projects'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('project_id', 'scope', 'key', name=op.f('pk_idempotency_reservations')),
    )


def downgrade() -> None:
    op.drop_table('idempotency_reservations')
