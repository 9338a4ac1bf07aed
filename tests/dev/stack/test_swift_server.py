"""The devstack's Swift is a real Swift all-in-one that keeps its objects across stop/start."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from matos_dev.stack import process
from matos_dev.stack.swift import SERVERS, SWIFT_VERSION, SwiftServer
from swiftclient.client import Connection

# Shared with the project's conftest (git-ignored) so the swift venv is built only once.
CACHE_DIR = Path(__file__).resolve().parents[3] / ".devstack" / "cache"

pytestmark = pytest.mark.timeout(600)

CONTAINER = "devstack-test"
OBJECT = "dir/blob-\u00e9.bin"
DATA = os.urandom(3 * 1024 * 1024)  # random binary, 3 MiB


def _connection(server: SwiftServer) -> Connection:
    # Plain swiftclient, auth v1.0, as any client of the devstack would do it.
    return Connection(authurl=server.auth_url, user="test:tester", key="testing",
                      auth_version="1", retries=1)


def _pids_and_ports(server: SwiftServer) -> tuple[list[int], list[int]]:
    servers = server.status()["servers"]
    return [servers[s]["pid"] for s in SERVERS], [servers[s]["port"] for s in SERVERS]


def _processes_using(path: Path) -> list[str]:
    """Command lines of live processes that mention `path` (our servers name their confs)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def _is_server_of(pid: int, server: SwiftServer) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(server.etc).encode() in cmdline


def _sockets_of(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _table(name: str) -> list[list[str]]:
    return [line.split() for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]]


def _assert_stopped(server: SwiftServer, pids: list[int], ports: list[int]) -> None:
    assert not server.running()
    status = server.status()
    assert not status["running"]
    for name in SERVERS:
        assert status["servers"][name]["running"] is False
        assert status["servers"][name]["pid"] is None
        assert not server.pid_files[name].exists()
    for pid in pids:
        # PIDs are recycled fast on a busy machine: "gone" means no longer our server.
        assert not _is_server_of(pid, server), f"PID {pid} still alive"
    for port in ports:
        assert not process.port_open(port), f"127.0.0.1:{port} still open"
    assert _processes_using(server.data_dir) == []


def test_object_round_trip_and_survives_restart(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("swift")
    proxy_port = process.free_port()
    server = SwiftServer(data_dir, CACHE_DIR, proxy_port=proxy_port)
    try:
        server.start()
        assert server.installed()
        assert server.venv == CACHE_DIR / f"swift-{SWIFT_VERSION}-venv"
        assert server.auth_url == f"http://127.0.0.1:{proxy_port}/auth/v1.0"
        assert server.running()
        pids, ports = _pids_and_ports(server)
        assert len(set(pids)) == 4 and len(set(ports)) == 4 and ports[0] == proxy_port

        conn = _connection(server)
        storage_url, _token = conn.get_auth()
        assert storage_url == f"http://127.0.0.1:{proxy_port}/v1/AUTH_test"
        conn.put_container(CONTAINER)
        etag = conn.put_object(CONTAINER, OBJECT, DATA, content_type="application/octet-stream")
        assert etag == hashlib.md5(DATA).hexdigest()
        headers, body = conn.get_object(CONTAINER, OBJECT)
        assert body == DATA
        assert headers["etag"] == etag
        assert int(headers["content-length"]) == len(DATA)
        # test:tester is an admin of AUTH_test: it may set account metadata.
        conn.post_account({"X-Account-Meta-Owner": "matos"})
        assert conn.head_account()["x-account-meta-owner"] == "matos"
        conn.close()

        server.stop()
        _assert_stopped(server, pids, ports)

        # A new object with default arguments but the same data dir (and proxy port)
        # reuses the backend ports and rings, and finds the object again.
        again = SwiftServer(data_dir, CACHE_DIR, proxy_port=proxy_port)
        assert again.ports() == dict(zip(SERVERS, ports))
        again.start()
        new_pids, new_ports = _pids_and_ports(again)
        assert new_ports == ports
        assert set(new_pids).isdisjoint(pids)
        conn = _connection(again)
        headers, body = conn.get_object(CONTAINER, OBJECT)
        assert hashlib.md5(body).hexdigest() == etag == headers["etag"]
        assert body == DATA
        assert [c["name"] for c in conn.get_account()[1]] == [CONTAINER]
        conn.close()
        again.stop()
        _assert_stopped(again, new_pids, new_ports)
    finally:
        server.stop()


def test_start_and_stop_are_idempotent_and_loopback_only(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("swift")
    server = SwiftServer(data_dir, CACHE_DIR, proxy_port=process.free_port())
    try:
        server.start()
        pids, ports = _pids_and_ports(server)
        server.start()  # already running: nothing new is started
        assert _pids_and_ports(server) == (pids, ports)
        assert server.running()

        status = server.status()
        assert status["auth_url"] == server.auth_url
        assert status["data_dir"] == str(data_dir)
        for name in SERVERS:
            entry = status["servers"][name]
            assert entry["running"] and Path(entry["log_file"]).is_file()
            assert Path(entry["log_file"]) == server.log_files[name]
        assert "GET /auth/v1.0" in server.log_files["proxy"].read_text()

        # One process per server (workers = 0: no forked children), each listening on
        # 127.0.0.1 only, and none with a UDP socket (no syslog datagrams).
        children = [p for p in Path("/proc").iterdir() if p.name.isdigit()
                    and _ppid(p) in pids]
        assert children == []
        listening = {row[9]: row[1] for row in _table("tcp") if row[3] == "0A"}
        listening6 = {row[9] for row in _table("tcp6") if row[3] == "0A"}
        udp = {row[9] for row in _table("udp") + _table("udp6")}
        for pid, port in zip(pids, ports):
            sockets = _sockets_of(pid)
            addresses = {listening[i] for i in sockets if i in listening}
            assert addresses == {f"0100007F:{port:04X}"}, (pid, addresses)
            assert not sockets & listening6
            assert not sockets & udp

        server.stop()
        server.stop()  # already stopped: nothing to do
        _assert_stopped(server, pids, ports)
    finally:
        server.stop()


def _ppid(proc: Path) -> int | None:
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])
