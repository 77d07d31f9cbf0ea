"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-22
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('projects',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_projects')),
    sa.UniqueConstraint('name', name=op.f('uq_projects_name'))
    )
    op.create_table('api_keys',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('project_id', sa.String(length=40), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('revoked_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_api_keys_project_id_projects'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_keys')),
    sa.UniqueConstraint('key_hash', name=op.f('uq_api_keys_key_hash'))
    )
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_keys_project_id'), ['project_id'], unique=False)

    op.create_table('graphs',
    sa.Column('n_ops', sa.Integer(), nullable=False),
    sa.Column('n_edges', sa.Integer(), nullable=False),
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('project_id', sa.String(length=40), nullable=False),
    sa.Column('digest', sa.String(length=80), nullable=False),
    sa.Column('name', sa.String(length=500), nullable=False),
    sa.Column('size_bytes', sa.Integer(), nullable=False),
    sa.Column('body', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_graphs_project_id_projects'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_graphs')),
    sa.UniqueConstraint('project_id', 'digest', name=op.f('uq_graphs_project_id'))
    )
    with op.batch_alter_table('graphs', schema=None) as batch_op:
        batch_op.create_index('ix_graphs_project_name', ['project_id', 'name'], unique=False)

    op.create_table('plans',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('project_id', sa.String(length=40), nullable=False),
    sa.Column('job_id', sa.String(length=40), nullable=True),
    sa.Column('cache_key', sa.String(length=80), nullable=True),
    sa.Column('solver', sa.String(length=100), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('objective', sa.String(length=20), nullable=True),
    sa.Column('objective_s', sa.Float(), nullable=True),
    sa.Column('iteration_s', sa.Float(), nullable=True),
    sa.Column('latency_s', sa.Float(), nullable=True),
    sa.Column('throughput_samples_per_s', sa.Float(), nullable=True),
    sa.Column('lower_bound_s', sa.Float(), nullable=True),
    sa.Column('efficiency', sa.Float(), nullable=True),
    sa.Column('peak_memory_bytes', sa.Float(), nullable=True),
    sa.Column('solve_time_s', sa.Float(), nullable=True),
    sa.Column('body', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_plans_project_id_projects'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_plans'))
    )
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_plans_job_id'), ['job_id'], unique=False)
        batch_op.create_index('ix_plans_project_cache', ['project_id', 'cache_key'], unique=False)

    op.create_table('topologies',
    sa.Column('n_devices', sa.Integer(), nullable=False),
    sa.Column('n_hosts', sa.Integer(), nullable=False),
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('project_id', sa.String(length=40), nullable=False),
    sa.Column('digest', sa.String(length=80), nullable=False),
    sa.Column('name', sa.String(length=500), nullable=False),
    sa.Column('size_bytes', sa.Integer(), nullable=False),
    sa.Column('body', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_topologies_project_id_projects'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_topologies')),
    sa.UniqueConstraint('project_id', 'digest', name=op.f('uq_topologies_project_id'))
    )
    with op.batch_alter_table('topologies', schema=None) as batch_op:
        batch_op.create_index('ix_topologies_project_name', ['project_id', 'name'], unique=False)

    op.create_table('comparisons',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('project_id', sa.String(length=40), nullable=False),
    sa.Column('graph_id', sa.String(length=40), nullable=True),
    sa.Column('topology_id', sa.String(length=40), nullable=True),
    sa.Column('objective', sa.String(length=20), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['graph_id'], ['graphs.id'], name=op.f('fk_comparisons_graph_id_graphs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_comparisons_project_id_projects'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['topology_id'], ['topologies.id'], name=op.f('fk_comparisons_topology_id_topologies'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_comparisons'))
    )
    with op.batch_alter_table('comparisons', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_comparisons_project_id'), ['project_id'], unique=False)

    op.create_table('jobs',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('project_id', sa.String(length=40), nullable=False),
    sa.Column('comparison_id', sa.String(length=40), nullable=True),
    sa.Column('graph_id', sa.String(length=40), nullable=True),
    sa.Column('topology_id', sa.String(length=40), nullable=True),
    sa.Column('solver', sa.String(length=100), nullable=False),
    sa.Column('objective', sa.String(length=20), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('options', sa.JSON(), nullable=False),
    sa.Column('time_limit_s', sa.Float(), nullable=False),
    sa.Column('use_cache', sa.Boolean(), nullable=False),
    sa.Column('cache_key', sa.String(length=80), nullable=False),
    sa.Column('cached', sa.Boolean(), nullable=False),
    sa.Column('cached_from', sa.String(length=40), nullable=True),
    sa.Column('idempotency_key', sa.String(length=200), nullable=True),
    sa.Column('request_digest', sa.String(length=80), nullable=True),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('cancel_requested', sa.Boolean(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('lease_owner', sa.String(length=100), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(), nullable=True),
    sa.Column('child_pid', sa.Integer(), nullable=True),
    sa.Column('progress', sa.JSON(), nullable=True),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('plan_id', sa.String(length=40), nullable=True),
    sa.Column('plan_status', sa.String(length=20), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('started_at', sa.DateTime(), nullable=True),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['comparison_id'], ['comparisons.id'], name=op.f('fk_jobs_comparison_id_comparisons'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['graph_id'], ['graphs.id'], name=op.f('fk_jobs_graph_id_graphs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], name=op.f('fk_jobs_plan_id_plans'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_jobs_project_id_projects'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['topology_id'], ['topologies.id'], name=op.f('fk_jobs_topology_id_topologies'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('project_id', 'idempotency_key', name=op.f('uq_jobs_project_id'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_comparison_id'), ['comparison_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_graph_id'), ['graph_id'], unique=False)
        batch_op.create_index('ix_jobs_project_cache', ['project_id', 'cache_key'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_project_id'), ['project_id'], unique=False)
        batch_op.create_index('ix_jobs_state_lease', ['state', 'lease_expires_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_topology_id'), ['topology_id'], unique=False)

    op.create_table('job_events',
    sa.Column('seq', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=40), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_events_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('seq', name=op.f('pk_job_events'))
    )
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.create_index('ix_job_events_job_seq', ['job_id', 'seq'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('job_events', schema=None) as batch_op:
        batch_op.drop_index('ix_job_events_job_seq')

    op.drop_table('job_events')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_topology_id'))
        batch_op.drop_index('ix_jobs_state_lease')
        batch_op.drop_index(batch_op.f('ix_jobs_project_id'))
        batch_op.drop_index('ix_jobs_project_cache')
        batch_op.drop_index(batch_op.f('ix_jobs_graph_id'))
        batch_op.drop_index(batch_op.f('ix_jobs_comparison_id'))

    op.drop_table('jobs')
    with op.batch_alter_table('comparisons', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_comparisons_project_id'))

    op.drop_table('comparisons')
    with op.batch_alter_table('topologies', schema=None) as batch_op:
        batch_op.drop_index('ix_topologies_project_name')

    op.drop_table('topologies')
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_index('ix_plans_project_cache')
        batch_op.drop_index(batch_op.f('ix_plans_job_id'))

    op.drop_table('plans')
    with op.batch_alter_table('graphs', schema=None) as batch_op:
        batch_op.drop_index('ix_graphs_project_name')

    op.drop_table('graphs')
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_keys_project_id'))

    op.drop_table('api_keys')
    op.drop_table('projects')
