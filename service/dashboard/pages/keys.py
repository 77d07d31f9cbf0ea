"""The project's API keys: create one (its secret is shown once), list them by prefix, revoke one."""

from __future__ import annotations

from fastapi import Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse

from service.auth import create_key, list_keys, revoke_key
from service.dashboard.pages.common import ViewerDep, page_router
from service.dashboard.render import page
from service.deps import CtxDep, SessionDep

router = page_router()


@router.get("/keys")
def keys_list(viewer: ViewerDep, session: SessionDep) -> Response:
    return page("keys.html", viewer, keys=list_keys(session, viewer.project_id), secret=None)


@router.post("/keys")
async def key_create(viewer: ViewerDep, session: SessionDep) -> Response:
    """A new key of this project; the page shows its secret this once (only its hash is stored)."""
    def create() -> str:
        secret = create_key(session, viewer.project_name)
        session.commit()
        return secret
    secret = await run_in_threadpool(create)
    keys = await run_in_threadpool(list_keys, session, viewer.project_id)
    return page("keys.html", viewer, status_code=201, keys=keys, secret=secret, new_prefix=secret[:10])


@router.post("/keys/{key_id}/revoke")
def key_revoke(key_id: str, viewer: ViewerDep, ctx: CtxDep, session: SessionDep) -> Response:
    """Revoke the key: this server refuses it (and ends its dashboard sessions) at once."""
    row = revoke_key(session, viewer.project_id, key_id)
    session.commit()
    ctx.keys.drop(row.key_hash)
    return RedirectResponse("/keys", status_code=303)
