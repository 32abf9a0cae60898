"""``xjobs.host``: the public path of the in-process host and its queue worker, used as the
guide ("Workers in your own process") writes it."""

from __future__ import annotations

import threading

import xjobs
import xjobs.host
from xjobs import testing
from xjobs.workers import host as internal_host
from xjobs.workers import queue_worker


def test_the_public_names_are_the_hosts_own():
    assert xjobs.host.InProcessHost is internal_host.InProcessHost
    assert xjobs.host.QueueWorker is queue_worker.QueueWorker
    assert sorted(xjobs.host.__all__) == ["InProcessHost", "QueueWorker"]


def test_a_worker_hosted_in_this_process_runs_a_job_and_stops():
    registry = xjobs.Registry()
    ran = threading.Event()

    @xjobs.job(queue="emails", idempotency_key=lambda i: f"welcome:{i['user_id']}", tenant="none",
               registry=registry)
    def send_welcome(ctx, input):
        ran.set()

    with testing.memory_queue():
        send_welcome.enqueue({"user_id": 1})
        host = xjobs.host.InProcessHost(xjobs.host.QueueWorker(
            driver=xjobs.current_driver(), registry=registry, queue="emails", concurrency=16)).start()
        try:
            assert ran.wait(10)
        finally:
            host.stop()
        assert testing.enqueued(send_welcome, states="completed") != []
