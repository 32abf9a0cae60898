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
transaction commits (a SQLAlchemy ``Session`` on a psycopg engine serves as well).
``payload`` defaults to ``{}``; ``None`` is refused, because ``None`` is what a wait that timed
out answers.

``await xjobs.asend_event(...)`` is the same send, awaited: on your ``AsyncConnection`` (or
``AsyncSession``) in its transaction, else ``send_event`` on a worker thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .config import current_driver, current_settings
from .connections import AsyncJoinable, Joinable, ajoined, async_writes, joined
from .drivers.base import EventStore, NewEvent, SentEvent
from .drivers.refusals import check_event
from .errors import PayloadInvalid
from .payload import encode_payload


_EMPTY: Any = object()


def send_event(event: str, *, key: str | None = None, payload: Any = _EMPTY,
               conn: Joinable | None = None,
               driver: EventStore | None = None) -> SentEvent:
    """Store ``event`` (with ``key``: only waiters of that key get it) and wake its waiters;
    answers the stored event's id and how many suspended jobs it woke."""
    new = _new_event(event, key, payload)
    callers = joined(conn, "send_event")
    store: EventStore = driver if driver is not None else current_driver()
    return store.event_send(new, conn=callers)


async def asend_event(event: str, *, key: str | None = None, payload: Any = _EMPTY,
                      conn: AsyncJoinable | None = None, driver: EventStore | None = None) -> SentEvent:
    """``send_event``, awaited: on ``conn`` (an ``AsyncConnection`` or ``AsyncSession``, read
    committed) in its transaction, else ``send_event`` on a worker thread (see
    ``xjobs.enqueue.aenqueue_many`` for why a thread)."""
    new = _new_event(event, key, payload)
    store: EventStore = driver if driver is not None else current_driver()
    if conn is None:
        return await asyncio.to_thread(store.event_send, new)
    return await async_writes(store).event_send_async(new, await ajoined(conn, "asend_event"))


def _new_event(event: str, key: str | None, payload: Any) -> NewEvent:
    """The event a send stores, every refusal of both sends checked here."""
    name, stored_key = check_event(event, "" if key is None else key)
    if payload is _EMPTY:
        payload = {}
    elif payload is None:
        raise PayloadInvalid("send_event: payload=None is what a timed-out wait answers; send {} "
                             "or a value")
    return NewEvent(name, stored_key, encode_payload(payload, current_settings().max_payload_bytes))
