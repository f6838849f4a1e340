"""Tenants: the known tenants, the (tenant, deadline) ready index, and '' as the default tenant

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-08

The reserved ``tenant`` column gets a default of ``''`` (the default tenant; metadata only, no
table rewrite); ``chronos_tenants`` lists the tenants the fair claim visits in turn (the default
tenant from the start: no scan of the messages, whose tenant is NULL before this release); and the
index each visit probes: ``(tenant, deadline)`` over the rows neither claimed nor parked, built
CONCURRENTLY so that upgrading a live cluster never blocks intake or firing.

Rolling upgrade: compatible with the previous release both ways. Its inserts name no tenant and
now get ``''`` (the default tenant, known from the start); rows it wrote before (``tenant`` NULL)
are claimed oldest first by either release, as before. The previous release never reads the new
column default, the new table or the new index, and its claim keeps its plan (the ready index).
Release note: the nodes' role needs ``GRANT SELECT, INSERT, UPDATE, DELETE ON chronos_tenants``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chronos.store.migrate import drop_invalid_index

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column(
        "chronos_messages",
        "tenant",
        existing_type=sa.String(128),
        server_default=sa.text("''"),
        comment="tenant for fair claiming under overload (empty: the default tenant; NULL: "
        "written before tenants, claimed oldest first only)",
    )
    op.create_table(
        "chronos_tenants",
        sa.Column(
            "tenant",
            sa.String(128),
            primary_key=True,
            comment="a tenant ('': the default tenant)",
        ),
        if_not_exists=True,  # re-run after an interruption in the index build below
    )
    op.execute("INSERT INTO chronos_tenants (tenant) VALUES ('') ON CONFLICT DO NOTHING")
    with op.get_context().autocommit_block():
        drop_invalid_index(op, "chronos_messages_tenant_ready_idx", "chronos_messages")
        op.create_index(
            "chronos_messages_tenant_ready_idx",
            "chronos_messages",
            ["tenant", "deadline"],
            # the ready index's predicate, written as the fair claim's probes write it (so
            # neither index is ever walked in place of the other: chronos/store/schema.py)
            postgresql_where=sa.text("coalesce(readied_at, parked_at) IS NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "chronos_messages_tenant_ready_idx",
            table_name="chronos_messages",
            postgresql_concurrently=True,
            if_exists=True,
        )
    op.drop_table("chronos_tenants")
    op.alter_column(
        "chronos_messages",
        "tenant",
        existing_type=sa.String(128),
        server_default=None,
        comment="reserved: tenant for fair scheduling under overload",
    )
