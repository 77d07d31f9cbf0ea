"""launcher run records uploaded for a plan (placer.run/v1); the warnings of plans and jobs

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'runs',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('plan_id', sa.String(length=40), nullable=False),
        sa.Column('digest', sa.String(length=80), nullable=False),
        sa.Column('world_size', sa.Integer(), nullable=False),
        sa.Column('device_kind', sa.String(length=200), nullable=False),
        sa.Column('iteration_s', sa.Float(), nullable=True),
        sa.Column('profiled', sa.Boolean(), nullable=False),
        sa.Column('size_bytes', sa.Integer(), nullable=False),
        sa.Column('body', sa.LargeBinary(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], name=op.f('fk_runs_plan_id_plans'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_runs_project_id_projects'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_runs')),
    )
    op.create_index('ix_runs_project_plan', 'runs', ['project_id', 'plan_id'], unique=False)
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.add_column(sa.Column('warnings', sa.JSON(), nullable=True))
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('warnings', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('warnings')
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_column('warnings')
    op.drop_index('ix_runs_project_plan', table_name='runs')
    op.drop_table('runs')
