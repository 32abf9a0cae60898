"""``xjobs.send_event``: deliver an event to every job waiting for it in
``ctx.step.wait_for_event(name, event, key=...)``.

    with conn.transaction():
        conn.execute("update orders set paid = true where id = %s", (order_id,))
        xjobs.send_event("order.paid", key=str(order_id), payload={"amount": 42}, conn=conn)

The event is stored (for ``event_retention``, default 7 days), so a job that starts waiting
AFTER the send still gets it: a wait answers the first stored event of its name and key.
Events are not consumed: every job waiting on that name and key gets the same payload. Jobs
parked on it are woken in the same transaction and their workers told at once (NOTIFY), so
delivery takes milliseconds, not a poll. With ``conn=`` (your psycopg connection, in your
transaction) the event exists, and wakes anyone, only if that transaction commits.
"""

from __future__ import annotations

from typing import Any

from .config import current_driver, current_settings
from .drivers.base import EventStore, NewEvent, SentEvent
from .drivers.refusals import check_event
from .payload import encode_payload


def send_event(event: str, *, key: str | None = None, payload: Any = None, conn: Any = None,
               driver: EventStore | None = None) -> SentEvent:
    """Store ``event`` (with ``key``: only waiters of that key get it) and wake its waiters;
    answers the stored event's id and how many parked jobs it woke."""
    name, stored_key = check_event(event, "" if key is None else key)
    encoded = encode_payload(payload, current_settings().max_payload_bytes)
    store: EventStore = driver if driver is not None else current_driver()
    return store.event_send(NewEvent(name, stored_key, encoded), conn=conn)
