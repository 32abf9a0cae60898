"""The metrics port under misbehaving clients: half-sent requests, tricklers, floods, forks.

Clients are real sockets on 127.0.0.1. Tests wait on ``open_connections()`` (what the server
tracks) instead of sleeping. How soon a probe answers beside slow clients is
``bench/latency.py``'s table; here, that it answers while they are all still held.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from contextlib import ExitStack

import pytest

from tests.waiting import wait_for
from xjobs.errors import InvalidOption
from xjobs.supervisor.metrics import MetricsEndpoint, MetricsSnapshot

READY = MetricsSnapshot(alive_at=0.0, not_ready=None)
HALF = b"GET /metr"   # no end of line, no blank line: the server waits for the rest


@pytest.fixture
def make_endpoint():
    made: list[MetricsEndpoint] = []

    def build(**kwargs) -> MetricsEndpoint:
        ep = MetricsEndpoint("127.0.0.1:0", **kwargs)
        ep.publish(READY)
        ep.start()
        made.append(ep)
        return ep

    yield build
    for ep in made:
        ep.stop()


def half_sent(ep: MetricsEndpoint, stack: ExitStack, n: int) -> list[socket.socket]:
    clients = []
    for _ in range(n):
        sock = stack.enter_context(socket.create_connection(_addr(ep), timeout=10))
        sock.sendall(HALF)
        clients.append(sock)
    return clients


def readyz(ep: MetricsEndpoint) -> tuple[float, bytes]:
    """One probe on a fresh connection, as a kubelet sends it; answers (seconds, response)."""
    started = time.perf_counter()
    with socket.create_connection(_addr(ep), timeout=10) as sock:
        sock.sendall(b"GET /readyz HTTP/1.0\r\nHost: probe\r\n\r\n")
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return time.perf_counter() - started, b"".join(chunks)


def ended_by_server(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the server closes this connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _addr(ep: MetricsEndpoint) -> tuple[str, int]:
    return ("127.0.0.1", ep.server.server_address[1])


def test_readyz_answers_in_milliseconds_while_50_clients_hold_half_sent_requests(make_endpoint):
    ep = make_endpoint(request_timeout_s=60.0)   # the slow clients stay for the whole test
    with ExitStack() as stack:
        half_sent(ep, stack, 50)
        wait_for(lambda: ep.open_connections() == 50, 10, "50 half-sent requests to be accepted")
        probes = [readyz(ep) for _ in range(5)]
        # served one at a time, a probe would wait out the slow clients' 60 s timeout: its own
        # 10 s socket timeout would fail it first
        assert all(response.startswith(b"HTTP/1.0 200") for _, response in probes), probes
        assert ep.open_connections() >= 50      # answered while every slow client was still held
        # the probes' own connections go as their threads finish; the slow ones all stay
        wait_for(lambda: ep.open_connections() == 50, 10, "only the 50 slow clients to be left")


def test_a_half_sent_request_is_cut_off_after_the_request_timeout(make_endpoint):
    ep = make_endpoint(request_timeout_s=0.5)
    with ExitStack() as stack:
        [client] = half_sent(ep, stack, 1)
        assert ended_by_server(client)
    wait_for(lambda: ep.open_connections() == 0, 5, "the connection to be forgotten")


def test_a_client_trickling_bytes_is_cut_off_too(make_endpoint):
    # each byte arrives well within the read timeout; only the connection's deadline ends it
    ep = make_endpoint(request_timeout_s=0.5)
    with socket.create_connection(_addr(ep), timeout=10) as sock:
        ended = False
        for byte in b"GET /metrics HTTP/1.0\r\nX-Slow: " + b"a" * 200:   # 20 s at 0.1 s a byte
            try:
                sock.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                ended = True
                break
            if select.select([sock], [], [], 0.1)[0]:
                ended = ended_by_server(sock, 1.0)
                break
        assert ended, "the trickler was never cut off"
    wait_for(lambda: ep.open_connections() == 0, 5, "the connection to be forgotten")


@pytest.mark.timing
def test_stop_returns_promptly_and_hangs_up_on_slow_clients(make_endpoint):
    ep = make_endpoint(request_timeout_s=60.0)
    with ExitStack() as stack:
        clients = half_sent(ep, stack, 20)
        wait_for(lambda: ep.open_connections() == 20, 10, "20 half-sent requests to be accepted")
        started = time.monotonic()
        ep.stop()
        assert time.monotonic() - started < 30, "stop waited for the clients' timeouts"
        assert all(ended_by_server(client) for client in clients)
    ep.stop()   # idempotent
    with pytest.raises(OSError):
        socket.create_connection(_addr(ep), timeout=2).close()


def test_connections_beyond_the_bound_are_closed_at_once_and_threads_stay_bounded(make_endpoint):
    ep = make_endpoint(request_timeout_s=60.0, max_connections=4)
    before = _serving_threads()
    with ExitStack() as stack:
        half_sent(ep, stack, 4)
        wait_for(lambda: ep.open_connections() == 4, 10, "four half-sent requests to be accepted")
        turned_away = half_sent(ep, stack, 6)
        assert all(ended_by_server(client) for client in turned_away)
        assert ep.open_connections() == 4
        assert _serving_threads() - before <= 4
    wait_for(lambda: ep.open_connections() == 0, 5, "the four to be closed by their clients")
    assert readyz(ep)[1].startswith(b"HTTP/1.0 200")


def _serving_threads() -> int:
    return sum(1 for t in threading.enumerate() if "process_request_thread" in t.name)


def test_a_fork_child_keeps_neither_the_listener_nor_any_connection(make_endpoint):
    ep = make_endpoint(request_timeout_s=60.0)
    port = ep.server.server_address[1]
    stop = threading.Event()

    def churn() -> None:   # connections accepted and closed all through the forks
        while not stop.is_set():
            readyz(ep)

    churner = threading.Thread(target=churn, daemon=True)
    with ExitStack() as stack:
        half_sent(ep, stack, 3)
        wait_for(lambda: ep.open_connections() >= 3, 10, "three half-sent requests to be accepted")
        churner.start()
        try:
            leaked = [_fork_and_count_server_sockets(ep, port) for _ in range(20)]
        finally:
            stop.set()
            churner.join(10)
        assert leaked == [0] * 20
        # the parent's own are untouched (the churn's last one goes as its thread finishes)
        wait_for(lambda: ep.open_connections() == 3, 10, "only the three slow clients to be left")
        assert readyz(ep)[1].startswith(b"HTTP/1.0 200")


def _fork_and_count_server_sockets(ep: MetricsEndpoint, port: int) -> int:
    """Fork; the child runs ``close_in_child`` and answers how many of its fds are still the
    server's end of the metrics port (the listener or an accepted connection)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: no pytest machinery from here on, only os._exit
        code = 1
        try:
            os.close(read_end)
            ep.close_in_child()
            os.write(write_end, str(_server_side_fds(port)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        text = answer.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return int(text)


def _server_side_fds(port: int) -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=int(name))
        except OSError:
            continue
        try:
            local = sock.getsockname()
            if isinstance(local, tuple) and local[1] == port:
                count += 1
        except OSError:
            pass
        finally:
            sock.detach()
    return count


def test_request_timeout_and_bound_are_checked():
    for kwargs in ({"request_timeout_s": 0.0}, {"request_timeout_s": float("nan")},
                   {"max_connections": 0}):
        with pytest.raises(InvalidOption) as exc:
            MetricsEndpoint("127.0.0.1:0", **kwargs)
        assert exc.value.option == "metrics"
