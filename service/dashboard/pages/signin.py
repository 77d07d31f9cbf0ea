"""Sign-in with an API key, sign-out, and the home page."""

from __future__ import annotations

import re
import secrets
from typing import Annotated

from fastapi import Query, Request, Response
from fastapi.responses import RedirectResponse
from sqlalchemy import select

from service.dashboard.pages.common import ViewerDep, form_fields, page_router, text_field
from service.dashboard.render import page
from service.dashboard.session import (
    PRE_COOKIE,
    SESSION_COOKIE,
    SESSION_S,
    check_csrf,
    csrf_token,
    session_secret,
    sign_in,
)
from service.db.models import Comparison
from service.deps import CtxDep, SessionDep
from service.errors import Unauthorized

router = page_router()


LOCAL_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9/_.~%?=&+-]*")


def _safe_next(target: str | None) -> str:
    """Only paths of this site: no scheme, no host, no ``//``, no character a browser would drop."""
    if not target or not LOCAL_PATH.fullmatch(target):
        return "/"
    return target


def _cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")


@router.get("/signin")
def signin_form(request: Request, next: Annotated[str | None, Query(max_length=2000)] = None) -> Response:
    nonce = secrets.token_hex(16)
    response = page("signin.html", None, csrf=csrf_token(session_secret(request), nonce, "signin"),
                    next=_safe_next(next), error=None)
    _cookie(response, request, PRE_COOKIE, nonce, 3600)
    return response


@router.post("/signin")
async def signin_submit(request: Request, ctx: CtxDep) -> Response:
    form = await form_fields(request)
    secret = session_secret(request)
    nonce = request.cookies.get(PRE_COOKIE, "")
    check_csrf(csrf_token(secret, nonce, "signin"), text_field(form, "csrf") if nonce else None)
    target = _safe_next(text_field(form, "next"))
    try:
        value = await sign_in(ctx, secret, text_field(form, "api_key"))
    except Unauthorized as exc:
        fresh = secrets.token_hex(16)
        refused = page("signin.html", None, status_code=401, csrf=csrf_token(secret, fresh, "signin"),
                       next=target, error=exc.message)
        _cookie(refused, request, PRE_COOKIE, fresh, 3600)
        return refused
    response = RedirectResponse(target, status_code=303)
    _cookie(response, request, SESSION_COOKIE, value, SESSION_S)
    response.delete_cookie(PRE_COOKIE, path="/")
    return response


@router.post("/signout")
def signout(viewer: ViewerDep) -> Response:
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/")
def home(viewer: ViewerDep, session: SessionDep) -> Response:
    """The newest comparison, or the graphs when there is none yet."""
    latest = session.scalar(select(Comparison.id).where(Comparison.project_id == viewer.project_id)
                            .order_by(Comparison.id.desc()).limit(1))
    return RedirectResponse(f"/comparisons/{latest}" if latest else "/graphs", status_code=303)
