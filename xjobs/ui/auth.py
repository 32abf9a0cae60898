"""Who may act on the dashboard, and proof that a form was posted by our own page.

Reading is open to whoever reaches the listener (bind it to localhost or put it behind a
proxy); acting needs ``--ui-actions`` AND one of:

* the token (``XJOBS_UI_TOKEN``), typed once on the sign-in page, which sets a session cookie
  signed with a key derived from the token (rotating the token signs everyone out), or sent
  as ``Authorization: Bearer TOKEN`` by a script;
* a trusted reverse proxy's header (``--ui-trust-header X-Forwarded-User``): the proxy has
  authenticated the user and names them. Only set it when every request passes through a
  proxy that strips the header from what clients send.

Every comparison of a secret is constant-time (``hmac.compare_digest``). Every form carries a
CSRF token that must equal the one in its cookie (double submit, ``SameSite=Strict``), and a
request whose ``Origin`` or ``Sec-Fetch-Site`` says it came from another site is refused
whatever it carries. A bearer request is exempt from the CSRF check: a browser never adds
that header on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from werkzeug.wrappers import Request, Response

SESSION_COOKIE = "xjobs_ui_session"
CSRF_COOKIE = "xjobs_ui_csrf"
SESSION_SECONDS = 12 * 3600


@dataclass(frozen=True)
class Guard:
    token: str | None = None            # XJOBS_UI_TOKEN
    trusted_header: str | None = None   # a proxy's user header, e.g. X-Forwarded-User
    actions: bool = False               # --ui-actions

    @property
    def can_sign_in(self) -> bool:
        return self.actions and bool(self.token)

    def _key(self) -> bytes:
        return hashlib.sha256(b"xjobs-ui-session\0" + (self.token or "").encode()).digest()

    def _sign(self, text: str) -> str:
        return hmac.new(self._key(), text.encode(), hashlib.sha256).hexdigest()

    def check_token(self, given: str) -> bool:
        if not self.token:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def session_value(self, now: float | None = None) -> str:
        expires = int((now or time.time()) + SESSION_SECONDS)
        return f"{expires}.{self._sign(f'session:{expires}')}"

    def _session_valid(self, value: str | None, now: float | None = None) -> bool:
        if not value or not self.token:
            return False
        expires, _, signature = value.partition(".")
        if not (expires.isascii() and expires.isdigit() and len(expires) <= 12) \
                or int(expires) < (now or time.time()):
            return False
        return hmac.compare_digest(signature.encode(), self._sign(f"session:{expires}").encode())

    def _bearer(self, request: Request) -> bool:
        scheme, _, given = (request.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and self.check_token(given.strip())

    def who(self, request: Request) -> str | None:
        """Who is acting, as the job's history records it; None: nobody we know."""
        if not self.actions:
            return None
        if self.trusted_header:
            user = (request.headers.get(self.trusted_header) or "").strip()
            if user:
                return f"ui:{user[:100]}"
        where = request.remote_addr or "?"
        if self._bearer(request):
            return f"ui:token@{where}"
        if self._session_valid(request.cookies.get(SESSION_COOKIE)):
            return f"ui:session@{where}"
        return None

    # -- CSRF -----------------------------------------------------------------------------------

    @staticmethod
    def csrf_token(request: Request) -> str:
        """The page's CSRF token: the cookie's when the browser has one, else a fresh one
        (``remember_csrf`` then sets the cookie on the response)."""
        current = request.cookies.get(CSRF_COOKIE)
        if current and len(current) >= 32:
            return current
        token = getattr(request, "_xjobs_fresh_csrf", None)
        if token is None:
            token = secrets.token_urlsafe(32)
            setattr(request, "_xjobs_fresh_csrf", token)
        return token

    @staticmethod
    def remember_csrf(request: Request, response: Response) -> None:
        fresh = getattr(request, "_xjobs_fresh_csrf", None)
        if fresh is not None:
            response.set_cookie(CSRF_COOKIE, fresh, httponly=True, samesite="Strict",
                                secure=request.is_secure, path=request.script_root or "/")

    def csrf_refusal(self, request: Request) -> str | None:
        """Why this POST cannot be trusted to come from our page; None when it can."""
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return f"refused: a {site} request"
        origin = request.headers.get("Origin")
        if origin and origin != "null":
            if urlsplit(origin).netloc != request.host:
                return "refused: the request came from another origin"
        if self._bearer(request):
            return None
        cookie = request.cookies.get(CSRF_COOKIE) or ""
        given = request.form.get("csrf") or ""
        if not cookie or not hmac.compare_digest(cookie.encode(), given.encode()):
            return "refused: the form's CSRF token is missing or stale (reload the page)"
        return None
