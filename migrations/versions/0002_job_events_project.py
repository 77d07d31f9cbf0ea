"""job_events carry their project, like every other row

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('project_id', sa.String(length=40), nullable=True))
    op.execute("UPDATE job_events SET project_id = (SELECT jobs.project_id FROM jobs WHERE jobs.id = job_events.job_id)")
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.alter_column('project_id', existing_type=sa.String(length=40), nullable=False)
        batch_op.create_foreign_key(batch_op.f('fk_job_events_project_id_projects'), 'projects', ['project_id'], ['id'],
                                    ondelete='CASCADE')


def downgrade() -> None:
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_job_events_project_id_projects'), type_='foreignkey')
        batch_op.drop_column('project_id')
