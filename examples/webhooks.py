"""Webhooks: an app that delivers each of its events to every subscribed endpoint, signed, and
a receiver that checks what it is sent.

The endpoints, the events and the delivery ledger are the app's own tables (in the schema
``WEBHOOKS_SCHEMA`` names, default ``public``, of the database ``XJOBS_DATABASE_URL`` names):
xjobs stores ids only, and reads the endpoint again on every attempt.

    python -m examples.webhooks install
    python -m examples.webhooks receive --port 8099 --secret whsec_demo      # in another terminal
    python -m examples.webhooks subscribe ep_1 http://127.0.0.1:8099/hook whsec_demo
    xjobsd run --app examples.webhooks
    python -m examples.webhooks publish order.paid '{"order": 1}'
    python -m examples.webhooks enable ep_1      # after it was disabled for failing
"""

from __future__ import annotations

import argparse
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from uuid import uuid4

import orjson
import psycopg
from psycopg import sql

import xjobs
from xjobs.webhooks import WebhookAttempt, WebhookEndpoint, WebhookEvent, verify


def _schema() -> sql.Identifier:
    return sql.Identifier(os.environ.get("WEBHOOKS_SCHEMA", "public"))


def _connect() -> psycopg.Connection:
    return psycopg.connect(os.environ["XJOBS_DATABASE_URL"])


def install() -> None:
    with _connect() as conn:
        conn.execute(sql.SQL("""
            create table if not exists {s}.webhook_endpoints (
                id text primary key, url text not null, secret text not null,
                headers jsonb not null default '{{}}', enabled boolean not null default true,
                failures integer not null default 0, disabled_reason text);
            create table if not exists {s}.webhook_events (
                id text primary key, topic text not null, body text not null,
                created_at timestamptz not null default now());
            create table if not exists {s}.webhook_attempts (
                id bigint generated always as identity primary key, endpoint_id text not null,
                event_id text not null, job_id bigint not null, attempt integer not null,
                sent_at bigint not null, delivered boolean not null, status integer, code text,
                error text, seconds double precision not null)""").format(s=_schema()))


class Ledger:
    """The delivery ledger: every attempt a row, and the endpoint's consecutive failures
    counted by the same transaction that records the attempt."""

    def record(self, attempt: WebhookAttempt) -> int:
        with _connect() as conn:
            conn.execute(sql.SQL("insert into {s}.webhook_attempts (endpoint_id, event_id, job_id, attempt, "
                                 "sent_at, delivered, status, code, error, seconds) "
                                 "values (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)").format(s=_schema()),
                         (attempt.endpoint_id, attempt.event_id, attempt.job_id, attempt.attempt, attempt.sent_at,
                          attempt.delivered, attempt.status, attempt.code, attempt.error, attempt.seconds))
            row = conn.execute(sql.SQL("update {s}.webhook_endpoints set failures = "
                                       "case when %s then 0 else failures + 1 end where id = %s "
                                       "returning failures").format(s=_schema()),
                               (attempt.delivered, attempt.endpoint_id)).fetchone()
        return row[0] if row else 0

    def disable(self, endpoint_id: str, reason: str) -> None:
        with _connect() as conn:
            conn.execute(sql.SQL("update {s}.webhook_endpoints set enabled = false, disabled_reason = %s "
                                 "where id = %s").format(s=_schema()), (reason, endpoint_id))


def endpoint(endpoint_id: str) -> WebhookEndpoint | None:
    with _connect() as conn:
        row = conn.execute(sql.SQL("select url, secret, headers, enabled from {s}.webhook_endpoints "
                                   "where id = %s").format(s=_schema()), (endpoint_id,)).fetchone()
    return None if row is None else WebhookEndpoint(url=row[0], secret=row[1], headers=row[2], enabled=row[3])


def event(event_id: str) -> WebhookEvent | None:
    with _connect() as conn:
        row = conn.execute(sql.SQL("select topic, body from {s}.webhook_events where id = %s").format(s=_schema()),
                           (event_id,)).fetchone()
    return None if row is None else WebhookEvent(topic=row[0], body=row[1])


# small numbers, so that a failing endpoint is disabled within seconds of the demo
deliver = xjobs.webhook(name="deliver_webhook", endpoint=endpoint, event=event, ledger=Ledger(),
                        max_failures=3, retry=xjobs.Retry(attempts=6, delay="500ms", max_delay="30s"))


def subscribe(endpoint_id: str, url: str, secret: str, headers: dict[str, str] | None = None) -> None:
    with _connect() as conn:
        conn.execute(sql.SQL("insert into {s}.webhook_endpoints (id, url, secret, headers) values (%s, %s, %s, %s) "
                             "on conflict (id) do update set url = excluded.url, secret = excluded.secret, "
                             "headers = excluded.headers").format(s=_schema()),
                     (endpoint_id, url, secret, orjson.dumps(headers or {}).decode()))


def enable(endpoint_id: str) -> None:
    """Re-enabling is the app's: the count starts afresh."""
    with _connect() as conn:
        conn.execute(sql.SQL("update {s}.webhook_endpoints set enabled = true, failures = 0, "
                             "disabled_reason = null where id = %s").format(s=_schema()), (endpoint_id,))


def publish(topic: str, body: str, event_id: str | None = None) -> str:
    """Store the event and enqueue one delivery per enabled endpoint, in one transaction."""
    event_id = event_id or f"evt_{uuid4().hex}"
    with _connect() as conn:
        conn.execute(sql.SQL("insert into {s}.webhook_events (id, topic, body) values (%s, %s, %s)").format(
            s=_schema()), (event_id, topic, body))
        ids = [r[0] for r in conn.execute(sql.SQL("select id from {s}.webhook_endpoints where enabled "
                                                  "order by id").format(s=_schema()))]
        deliver.enqueue_many([{"endpoint_id": e, "event_id": event_id} for e in ids], conn=conn)
    return event_id


class Receiving(BaseHTTPRequestHandler):
    """A receiver: checks the signature over the raw body before anything reads it."""

    secret = "whsec_demo"
    verified: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            got = verify(self.headers, body, self.secret, tolerance="5m")
        except xjobs.XJobsError as exc:
            self.send_response(401)
            self.end_headers()
            self.wfile.write(exc.code.encode())
            return
        self.verified.append((got.event_id, got.topic, got.body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"receiver: {format % args}\n")


def receiver(port: int, secret: str) -> ThreadingHTTPServer:
    handler = type("Receiver", (Receiving,), {"secret": secret, "verified": []})
    return ThreadingHTTPServer(("127.0.0.1", port), handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.webhooks")
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("install")
    recv = sub.add_parser("receive")
    recv.add_argument("--port", type=int, default=8099)
    recv.add_argument("--secret", default="whsec_demo")
    subs = sub.add_parser("subscribe")
    subs.add_argument("endpoint_id")
    subs.add_argument("url")
    subs.add_argument("secret")
    pub = sub.add_parser("publish")
    pub.add_argument("topic")
    pub.add_argument("body")
    on = sub.add_parser("enable")
    on.add_argument("endpoint_id")
    args = parser.parse_args(argv)
    if args.verb == "install":
        install()
    elif args.verb == "receive":
        print(f"receiving on http://127.0.0.1:{args.port}/ (Ctrl-C stops)")
        receiver(args.port, args.secret).serve_forever()
    elif args.verb == "subscribe":
        subscribe(args.endpoint_id, args.url, args.secret)
    elif args.verb == "publish":
        print(publish(args.topic, args.body))
    else:
        enable(args.endpoint_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
