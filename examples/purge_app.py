"""An application's own expiring stores, swept every hour by ``purge()`` and its task.

    xjobsd run --app examples.purge_app                         # the hourly task enqueues the sweep
    xjobsd enqueue app-purge --app examples.purge_app --input '{}'   # or sweep now
    xjobsd tick --app examples.purge_app                        # without a daemon: a timer's pass

Both halves are declared here, at import: the job (``purge``) and the schedule that enqueues it
(``task`` with ``DEFAULT_PURGE_CRON``). Each store only knows how to delete what expired by
the instant it is handed; which stores exist is read when the pass starts (``targets``), so a
store built later by the app's own start-up is still swept.
"""

from __future__ import annotations

import os
import threading
import time

import psycopg

from xjobs import DEFAULT_PURGE_CRON, purge, task


class RateLimits:
    """Request counters in the app's database, one row per key and window; a window that has
    ended is garbage. Deletes against the pass's instant, never the server's ``now()``, so a
    pass resumed after a crash deletes exactly what the first attempt would have."""

    name = "rate_limits"

    def purge_expired(self, now_ms: int) -> int:
        with psycopg.connect(os.environ["XJOBS_DATABASE_URL"], autocommit=True) as conn:
            conn.execute("create table if not exists app_rate_limits (key text primary key, "
                         "hits int not null, window_ends timestamptz not null)")
            return conn.execute("delete from app_rate_limits where window_ends < to_timestamp(%s / 1000.0)",
                                (now_ms,)).rowcount


class Sessions:
    """Login sessions held in this process, each with its expiry (epoch milliseconds)."""

    name = "sessions"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expires: dict[str, float] = {}

    def open(self, token: str, ttl_s: float = 3600.0) -> None:
        with self._lock:
            self._expires[token] = time.time() * 1000.0 + ttl_s * 1000.0

    def purge_expired(self, now_ms: int) -> int:
        with self._lock:
            expired = [token for token, at in self._expires.items() if at <= now_ms]
            for token in expired:
                del self._expires[token]
            return len(expired)


SESSIONS = Sessions()

app_purge = purge(name="app-purge", targets=lambda: [RateLimits(), SESSIONS])
task(name="app-purge-hourly", cron=DEFAULT_PURGE_CRON, tz="UTC", job=app_purge)
