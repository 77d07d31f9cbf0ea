"""calibrations (placer.calibration/v1) stored per project, attached to topologies; the calibration of a job

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'calibrations',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('digest', sa.String(length=80), nullable=False),
        sa.Column('document_digest', sa.String(length=80), nullable=False),
        sa.Column('name', sa.String(length=500), nullable=False),
        sa.Column('device_kinds', sa.JSON(), nullable=False),
        sa.Column('size_bytes', sa.Integer(), nullable=False),
        sa.Column('body', sa.LargeBinary(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_calibrations_project_id_projects'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_calibrations')),
        sa.UniqueConstraint('project_id', 'document_digest', name=op.f('uq_calibrations_project_id')),
    )
    with op.batch_alter_table('topologies', schema=None) as batch_op:
        batch_op.add_column(sa.Column('calibration_id', sa.String(length=40), nullable=True))
        batch_op.create_foreign_key(batch_op.f('fk_topologies_calibration_id_calibrations'), 'calibrations',
                                    ['calibration_id'], ['id'], ondelete='SET NULL')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('calibration_id', sa.String(length=40), nullable=True))
        batch_op.create_index(batch_op.f('ix_jobs_calibration_id'), ['calibration_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_calibration_id'))
        batch_op.drop_column('calibration_id')
    with op.batch_alter_table('topologies', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_topologies_calibration_id_calibrations'), type_='foreignkey')
        batch_op.drop_column('calibration_id')
    op.drop_table('calibrations')
