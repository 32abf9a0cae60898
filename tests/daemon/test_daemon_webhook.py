"""Webhooks through the daemon, as a user runs them: ``xjobsd run --app examples.webhooks``
delivering to a receiver on 127.0.0.1, the example's own commands publishing, and nothing of
an endpoint (its secret, the token in its URL, its Authorization header) in the job rows,
the daemon's log or the dashboard."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request

import orjson
import pytest

from tests.daemon_fixtures import CLI, free_port, wait_for
from tests.webhook_receiver import Reply, receiving
from xjobs.webhooks import verify

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]
pytest.importorskip("httpx", reason="webhook() needs the webhook extra")
pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")

SECRETS = {"ep_ok": "whsec_ok_s3cret", "ep_moved": "whsec_moved_s3cret", "ep_down": "whsec_down_s3cret",
           "ep_example": "whsec_example_s3cret"}
TOKEN = "url_t0ken_in_query"
BEARER = "auth_b3arer_value"
HIDDEN = (*SECRETS.values(), TOKEN, BEARER)
APP_TABLES = ("webhook_endpoints", "webhook_events", "webhook_attempts")


def example(env, *args: str) -> str:
    """``python -m examples.webhooks ...`` as a user runs it; answers what it printed."""
    done = subprocess.run([sys.executable, "-m", "examples.webhooks", *args], cwd=env.tmp, capture_output=True,
                          env={**env.process_env, "WEBHOOKS_SCHEMA": env.schema}, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def attempts(env, endpoint_id: str) -> list[tuple]:
    return env.sql("select attempt, delivered, status, code from {schema}.webhook_attempts "
                   "where endpoint_id = %s order by id", endpoint_id)


def job_of(env, endpoint_id: str, event_id: str) -> tuple[int, str, str | None]:
    rows = env.sql("select id, state, last_error from {schema}.jobs where idempotency_key = %s",
                   f"deliver_webhook:{endpoint_id}:{event_id}")
    return rows[0] if rows else (0, "", None)


def subscribe(env, endpoint_id: str, url: str) -> None:
    env.sql("insert into {schema}.webhook_endpoints (id, url, secret, headers) values (%s, %s, %s, %s)",
            endpoint_id, url, SECRETS[endpoint_id], orjson.dumps({"Authorization": f"Bearer {BEARER}"}).decode())


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def xjobs_rows_as_text(env) -> str:
    """Every row of every table xjobs keeps in the schema, as text (the app's own tables aside)."""
    tables = [r[0] for r in env.sql("select table_name from information_schema.tables where table_schema = %s "
                                    "and table_type = 'BASE TABLE'", env.schema)]
    texts = []
    for table in tables:
        if table in APP_TABLES or table == "effects":
            continue
        texts += [r[0] for r in env.sql(f'select t::text from {{schema}}."{table}" t')]
    return "\n".join(texts)


@pytest.mark.slow
def test_webhooks_through_the_daemon_are_verified_never_redirected_disabled_after_n_and_keep_their_secrets(
        daemon_env, request):
    env = daemon_env
    example(env, "install")
    with receiving() as receiver:
        receiver.answer("/ok", Reply(204))
        receiver.answer("/moved", Reply(302, {"location": receiver.url("/elsewhere")}))
        receiver.answer("/elsewhere", Reply(200))
        receiver.answer("/down", Reply(500))
        for endpoint_id, path in (("ep_ok", "/ok"), ("ep_moved", "/moved"), ("ep_down", "/down")):
            subscribe(env, endpoint_id, receiver.url(f"{path}?token={TOKEN}"))
        # the example's own receiver, as its docstring starts it: it answers 204 only to what verify accepts
        example_port = free_port()
        example_receiver = subprocess.Popen(
            [sys.executable, "-m", "examples.webhooks", "receive", "--port", str(example_port), "--secret",
             SECRETS["ep_example"]], cwd=env.tmp, env=env.process_env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT)
        request.addfinalizer(example_receiver.kill)
        wait_for(lambda: listening(example_port), 30, "the example's receiver to listen")
        env.sql("insert into {schema}.webhook_endpoints (id, url, secret) values ('ep_example', %s, %s)",
                f"http://127.0.0.1:{example_port}/hook?token={TOKEN}", SECRETS["ep_example"])
        ui_port = free_port()
        daemon = env.start("--app", "examples.webhooks", "--queue", "webhooks=1x4", "--ui", f"127.0.0.1:{ui_port}",
                           "--log-format", "json", "--log-level", "debug", WEBHOOKS_SCHEMA=env.schema)
        daemon.ready()
        event_id = example(env, "publish", "order.paid", '{"order": 42}')

        # delivered once, and the receiver verifies it with the endpoint's secret
        wait_for(lambda: job_of(env, "ep_ok", event_id)[1] == "completed", 30, "the delivery to ep_ok")
        [got] = receiver.at("/ok")
        checked = verify(got.headers, got.body, SECRETS["ep_ok"])
        assert (checked.event_id, checked.topic, checked.body) == (event_id, "order.paid", b'{"order": 42}')
        assert got.headers["authorization"] == f"Bearer {BEARER}"      # the endpoint's own header, sent
        wait_for(lambda: job_of(env, "ep_example", event_id)[1] == "completed", 30, "the example receiver's delivery")
        assert [a[1:] for a in attempts(env, "ep_example")] == [(True, 204, None)]
        example_receiver.terminate()
        assert b"POST /hook" in example_receiver.communicate(timeout=30)[0]

        # a failing endpoint is disabled after max_failures (3), its job dead; a 302 is a failure too
        wait_for(lambda: job_of(env, "ep_down", event_id)[1] == "dead", 60, "ep_down's delivery to die")
        assert "X_WEBHOOK_DISABLED" in (job_of(env, "ep_down", event_id)[2] or "")
        assert [a[1:] for a in attempts(env, "ep_down")] == [(False, 500, "X_WEBHOOK_STATUS")] * 3
        assert env.sql("select enabled from {schema}.webhook_endpoints where id = 'ep_down'") == [(False,)]
        wait_for(lambda: job_of(env, "ep_moved", event_id)[1] == "dead", 60, "ep_moved's delivery to die")
        assert {a[3] for a in attempts(env, "ep_moved")} == {"X_WEBHOOK_REDIRECT"}
        assert receiver.at("/elsewhere") == [] and len(receiver.at("/moved")) == 3

        # a disabled endpoint's next delivery completes without a request
        second = example(env, "publish", "order.paid", '{"order": 43}')   # enqueues for ep_ok alone
        done = subprocess.run(CLI + ["enqueue", "deliver_webhook", "--app", "examples.webhooks", "--input",
                                     orjson.dumps({"endpoint_id": "ep_down", "event_id": second}).decode()],
                              cwd=env.tmp, env={**env.process_env, "WEBHOOKS_SCHEMA": env.schema},
                              capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        wait_for(lambda: job_of(env, "ep_down", second)[1] == "completed", 30, "the skipped delivery")
        wait_for(lambda: job_of(env, "ep_ok", second)[1] == "completed", 30, "the second delivery to ep_ok")
        assert len(receiver.at("/down")) == 3 and len(attempts(env, "ep_down")) == 3

        # an input carrying more than ids is refused before anything is written
        refused = subprocess.run(CLI + ["enqueue", "deliver_webhook", "--app", "examples.webhooks", "--input",
                                        orjson.dumps({"endpoint_id": "ep_ok", "event_id": second,
                                                      "url": receiver.url("/ok")}).decode()],
                                 cwd=env.tmp, env={**env.process_env, "WEBHOOKS_SCHEMA": env.schema},
                                 capture_output=True, timeout=60)
        assert refused.returncode != 0 and b"X_JOB_INPUT_INVALID" in refused.stderr

        # nothing of an endpoint in the job rows (and their history and steps), the log or the dashboard
        rows = xjobs_rows_as_text(env)
        assert event_id in rows and not [s for s in HIDDEN if s in rows]
        assert not [s for s in HIDDEN if s in receiver.url("/")]          # (the port alone is no secret)
        pages = []
        for endpoint_id in ("ep_ok", "ep_moved", "ep_down"):
            job_id = job_of(env, endpoint_id, event_id)[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/jobs/{job_id}", timeout=10) as page:
                pages.append(page.read().decode())
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/dead", timeout=10) as page:
            pages.append(page.read().decode())
        assert all("deliver_webhook" in page for page in pages)
        assert "X_WEBHOOK_DISABLED" in pages[2] and not [s for s in HIDDEN if any(s in p for p in pages)]
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    log = daemon.log_path.read_text(errors="replace")
    assert "job.dead" in log and not [s for s in HIDDEN if s in log]
    assert os.path.getsize(daemon.log_path) > 0


def test_a_worker_killed_mid_delivery_has_it_sent_again(daemon_env):
    env = daemon_env
    example(env, "install")
    with receiving() as receiver:
        calls = []

        def first_hangs(_got):
            calls.append(1)
            return Reply(hang=True) if len(calls) == 1 else Reply(204)
        receiver.answer("/ok", first_hangs)
        subscribe(env, "ep_ok", receiver.url(f"/ok?token={TOKEN}"))
        daemon = env.start("--app", "examples.webhooks", "--queue", "webhooks=1x2", WEBHOOKS_SCHEMA=env.schema)
        daemon.ready()
        event_id = example(env, "publish", "order.paid", '{"order": 7}')
        wait_for(lambda: receiver.at("/ok"), 30, "the first request to arrive")
        [worker] = daemon.children("webhooks")
        os.kill(worker["pid"], signal.SIGKILL)            # the answer never reaches the worker
        wait_for(lambda: job_of(env, "ep_ok", event_id)[1] == "completed", 60, "the delivery to be made again")
        first, second = receiver.at("/ok")
        for got in (first, second):     # both are the same event, each verifiable: receivers dedupe on the id
            assert verify(got.headers, got.body, SECRETS["ep_ok"]).event_id == event_id
        # the killed attempt never reached the ledger; the one that got its answer did
        assert [a[1:] for a in attempts(env, "ep_ok")] == [(True, 204, None)]
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
