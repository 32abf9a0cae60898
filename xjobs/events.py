"""``xjobs.send_event``: deliver an event to every job waiting for it in
``ctx.step.wait_for_event(name, event, key=...)``.

    with conn.transaction():
        conn.execute("update orders set paid = true where id = %s", (order_id,))
        xjobs.send_event("order.paid", key=str(order_id), payload={"amount": 42}, conn=conn)

The event is stored (for ``event_retention``, default 7 days), so a job that starts waiting
AFTER the send still gets it: a wait answers the first event of its name and key sent since
its job was enqueued (an older one is not its business). Events are not consumed: every job
waiting on that name and key gets the same payload. Waits suspended on it are completed with
its payload and their jobs woken in the same transaction, and their workers are told at once
(NOTIFY), so delivery takes milliseconds, not a poll. With ``conn=`` (your psycopg connection,
in your read committed transaction) the event exists, and wakes anyone, only if that
transaction commits. ``payload`` defaults to ``{}``; ``None`` is refused, because ``None`` is
what a wait that timed out answers.
"""

from __future__ import annotations

from typing import Any

from .config import current_driver, current_settings
from .drivers.base import CallerConnection, EventStore, NewEvent, SentEvent
from .drivers.refusals import check_event
from .errors import PayloadInvalid
from .payload import encode_payload


_EMPTY: Any = object()


def send_event(event: str, *, key: str | None = None, payload: Any = _EMPTY,
               conn: CallerConnection | None = None,
               driver: EventStore | None = None) -> SentEvent:
    """Store ``event`` (with ``key``: only waiters of that key get it) and wake its waiters;
    answers the stored event's id and how many suspended jobs it woke."""
    name, stored_key = check_event(event, "" if key is None else key)
    if payload is _EMPTY:
        payload = {}
    elif payload is None:
        raise PayloadInvalid("send_event: payload=None is what a timed-out wait answers; send {} "
                             "or a value")
    encoded = encode_payload(payload, current_settings().max_payload_bytes)
    store: EventStore = driver if driver is not None else current_driver()
    return store.event_send(NewEvent(name, stored_key, encoded), conn=conn)
