"""The control socket: 0600, stale sockets replaced, a live one refused, other users refused."""

from __future__ import annotations

import os
import socket
import stat
import threading

import pytest

from xjobs.errors import InvalidOption
from xjobs.control_client import ControlUnavailable, request
from xjobs.supervisor.control import ControlServer, bind


def serve_once(server: ControlServer) -> threading.Thread:
    """Answer one client from a thread, the way the arbiter's loop would."""
    def loop() -> None:
        import select
        while True:
            select.select([server.listener], [], [], 5)
            clients = server.accept()
            if clients:
                conn = clients[0]
                conn.setblocking(True)
                while not server.readable(conn):
                    pass
                server.drop(conn)
                return
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_commands_are_answered_and_unknown_ones_named(tmp_path):
    path = str(tmp_path / "c.sock")
    server = ControlServer(path, bind(path), {"status": lambda m: {"ok": True, "state": "running"},
                                              "scale": lambda m: {"ok": True, "got": m}})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    serve_once(server).join(0)
    assert request(path, "status") == {"ok": True, "state": "running"}
    serve_once(server)
    assert request(path, "scale", queue="q", delta=1)["got"] == {"command": "scale", "queue": "q", "delta": 1}
    serve_once(server)
    answer = request(path, "explode")
    assert answer["ok"] is False and "explode" in answer["error"] and "status" in answer["error"]
    server.close()
    assert not os.path.exists(path)


def test_a_coded_refusal_keeps_its_code_over_the_socket(tmp_path):
    def scale(message):
        raise InvalidOption("delta", "queue q has 2 process(es) and would have -98")
    path = str(tmp_path / "c.sock")
    server = ControlServer(path, bind(path), {"scale": scale})
    serve_once(server)
    # InvalidOption is also a ValueError: it must not pass for a malformed request
    assert request(path, "scale", queue="q", delta=-100) == {
        "ok": False, "code": "X_INVALID_OPTION",
        "error": "X_INVALID_OPTION: delta: queue q has 2 process(es) and would have -98"}
    server.close()


def test_a_stale_socket_is_replaced_and_a_live_one_refused(tmp_path):
    path = str(tmp_path / "c.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()
    listener = bind(path)   # nobody answered there: taken over
    server = ControlServer(path, listener, {"status": lambda m: {"ok": True}})
    serving = serve_once(server)
    with pytest.raises(InvalidOption) as refused:
        bind(path)
    assert refused.value.option == "control" and "already answers" in str(refused.value)
    serving.join(5)   # it took the probing connection (and found no request on it)
    server.close()


def test_a_live_socket_whose_owner_answers_slowly_is_never_taken_over(tmp_path):
    path = str(tmp_path / "c.sock")
    owner = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    owner.bind(path)
    owner.listen(4)   # listening, but its loop is busy: it accepts nothing for now
    inode = os.stat(path).st_ino
    try:
        with pytest.raises(InvalidOption) as refused:
            bind(path)
        assert refused.value.option == "control" and "already answers" in str(refused.value)
        assert os.stat(path).st_ino == inode
    finally:
        owner.close()


def test_at_exit_the_path_is_removed_only_if_it_is_still_ours(tmp_path):
    path = str(tmp_path / "c.sock")
    server = ControlServer(path, bind(path), {"status": lambda m: {"ok": True}})
    os.unlink(path)   # someone removed the file, and another daemon took the path over
    successor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    successor.bind(path)
    successor.listen(1)
    try:
        server.close()
        assert os.path.exists(path), "removed the successor's socket"
    finally:
        successor.close()


def test_refusals_name_the_option(tmp_path):
    with pytest.raises(InvalidOption) as exc:
        bind("/proc/xjobsd.sock")
    assert exc.value.option == "control"
    regular = tmp_path / "file"
    regular.write_text("")
    with pytest.raises(InvalidOption, match="not a socket"):
        bind(str(regular))
    with pytest.raises(InvalidOption, match="too long"):
        bind(str(tmp_path / ("x" * 120)))


def test_no_daemon_is_a_clear_error(tmp_path):
    with pytest.raises(ControlUnavailable, match="no xjobsd is running"):
        request(str(tmp_path / "none.sock"), "status")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_another_user_is_refused_even_through_a_permissive_mode(tmp_path):
    path = str(tmp_path / "c.sock")
    server = ControlServer(path, bind(path), {"status": lambda m: {"ok": True, "secret": 42}})
    os.chmod(tmp_path, 0o755)
    os.chmod(path, 0o666)   # mode alone would let them in: SO_PEERCRED is what refuses
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgid(65534)
            os.setuid(65534)
            answer = request(path, "status")
            os.write(w, repr(answer).encode())
        except BaseException as exc:
            os.write(w, f"error {exc!r}".encode())
        os._exit(0)
    os.close(w)
    import select
    deadline_hit = False
    while True:
        ready, _, _ = select.select([server.listener, r], [], [], 5)  # type: ignore[type-var]
        if not ready:
            deadline_hit = True
            break
        if server.listener in ready:
            server.accept()   # refuses in accept: never reaches a handler
        if r in ready:
            break
    os.waitpid(pid, 0)
    out = os.read(r, 4096).decode()
    os.close(r)
    server.close()
    assert not deadline_hit
    assert "refused" in out and "42" not in out
