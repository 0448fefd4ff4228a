"""The trust boundary of `modefsm serve --http`: Host, Origin, the bearer token, the binding.

Real servers (`modefsm serve --http` subprocesses on 127.0.0.1), the SDK's v1 and v2
clients over streamable HTTP and WebSocket, raw HTTP for what a client library would not
send (a rebinding ``Host``, a foreign ``Origin``, a preflight).
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import re
import signal
import stat
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import acp
import pytest

from modefsm.protocol import TOKEN_SUBPROTOCOL
from tests.acp_client import TestClient
from tests.protocol.http_wire import (
    TIMEOUT,
    Served,
    auth,
    http_server,
    listening,
    post,
    transport_to,
    v1_client,
    ws_connect,
)
from tests.protocol.test_http_v2 import V2Client, v2_client

pytestmark = pytest.mark.e2e

INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'
WRONG = "w" * 43


def refusal(rule: str) -> dict[str, Any]:
    """The exact body of a refusal by *rule*."""
    if rule == "token":
        details = (
            "a bearer token is required: Authorization: Bearer TOKEN (a WebSocket may "
            "instead offer the subprotocols acp and modefsm.token.TOKEN)"
        )
        error = {"code": -32000, "message": "Authentication required"}
    else:
        what, flag = ("Host", "host") if rule == "host" else ("Origin", "origin")
        kind = "name" if rule == "host" else "origin"
        details = (
            f"the request's {what} is not a loopback {kind} or an allowed {flag} "
            f"(modefsm serve --allow-{flag})"
        )
        error = {"code": -32600, "message": "Invalid request"}
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {**error, "data": {"details": details, "rule": rule}},
    }


def request(
    url: str, method: str, headers: dict[str, str], body: bytes | None = None
) -> tuple[int, dict[str, str], Any]:
    """One raw request exactly as given (no header added); status, headers, JSON body."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=TIMEOUT)
    try:
        connection.putrequest(method, parts.path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        data = response.read() if response.status != 101 else b""
        found = {k.lower(): v for k, v in response.getheaders()}
        return response.status, found, json.loads(data) if data else None
    finally:
        connection.close()


def host_of(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def upgrade_headers(url: str, **extra: str) -> dict[str, str]:
    key = base64.b64encode(os.urandom(16)).decode()
    return {
        "Host": host_of(url),
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Version": "13",
        **extra,
    }


def preflight(url: str, origin: str) -> dict[str, str]:
    """The headers of a browser's CORS preflight from *origin* for a POST with the token."""
    return {
        "Host": host_of(url),
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, acp-connection-id",
    }


def json_post(url: str, **extra: str) -> dict[str, str]:
    return {"Host": host_of(url), "Content-Type": "application/json", **auth(url), **extra}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    log = tmp_path_factory.mktemp("trust") / "modes.jsonl"
    with http_server(log) as url:
        yield url, log


@pytest.mark.parametrize(
    ("rule", "header"), [("host", "Host"), ("origin", "Origin")], ids=["host", "origin"]
)
def test_a_foreign_websocket_upgrade_is_refused_before_it_is_accepted(server, rule, header):
    url, _log = server
    foreign = "attacker.example" if rule == "host" else "http://attacker.example"
    status, found, body = request(
        url, "GET", upgrade_headers(url, **auth(url), **{header: foreign})
    )
    assert (status, body) == (403, refusal(rule))
    assert "sec-websocket-accept" not in found


class TestHost:
    """A rebinding Host is refused before anything else; loopback names pass."""

    @pytest.mark.parametrize(
        "host", ["attacker.example", "attacker.example:{port}", "127.0.0.1.nip.io:{port}", ""]
    )
    def test_a_foreign_host_is_refused_403(self, server, host):
        url, _log = server
        port = urllib.parse.urlsplit(url).port
        headers = json_post(url, Host=host.format(port=port))
        assert request(url, "POST", headers, INITIALIZE)[::2] == (403, refusal("host"))

    @pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "[::1]", "LOCALHOST"])
    def test_loopback_names_pass_with_any_port(self, server, name):
        url, _log = server
        for port in ("", ":1", f":{urllib.parse.urlsplit(url).port}"):
            status, found, body = request(url, "POST", json_post(url, Host=name + port), INITIALIZE)
            assert (status, body["result"]["protocolVersion"]) == (200, 1)
            assert "acp-connection-id" in found


class TestOrigin:
    """A web page's Origin is refused unless it is loopback or allowed."""

    @pytest.mark.parametrize(
        "origin", ["http://attacker.example", "null", "http://127.0.0.2:8000", "file://"]
    )
    def test_a_foreign_origin_is_refused_403_over_http(self, server, origin):
        url, _log = server
        headers = json_post(url, Origin=origin)
        assert request(url, "POST", headers, INITIALIZE)[::2] == (403, refusal("origin"))

    def test_a_loopback_origin_is_served_and_gets_cors_headers(self, server):
        url, _log = server
        status, found, body = request(
            url, "POST", json_post(url, Origin="http://localhost:5173"), INITIALIZE
        )
        assert (status, body["id"]) == (200, 0)
        assert found["access-control-allow-origin"] == "http://localhost:5173"
        assert found["access-control-expose-headers"] == "Acp-Connection-Id, Acp-Session-Id"
        assert found["vary"] == "Origin"

    def test_a_preflight_from_a_foreign_origin_is_refused(self, server):
        url, _log = server
        headers = preflight(url, "http://attacker.example")
        assert request(url, "OPTIONS", headers)[::2] == (403, refusal("origin"))

    def test_a_preflight_from_an_allowed_origin_is_answered(self, server):
        url, _log = server
        status, found, body = request(url, "OPTIONS", preflight(url, "http://127.0.0.1:3000"))
        assert (status, body) == (204, None)
        assert {k: v for k, v in found.items() if k.startswith("access-control-")} == {
            "access-control-allow-origin": "http://127.0.0.1:3000",
            "access-control-allow-methods": "GET, POST, DELETE",
            "access-control-allow-headers": (
                "Authorization, Content-Type, Accept, Acp-Connection-Id, Acp-Session-Id"
            ),
            "access-control-max-age": "600",
            "access-control-expose-headers": "Acp-Connection-Id, Acp-Session-Id",
        }


class TestToken:
    """Every request and upgrade needs the token; the SDK clients send it as a header."""

    @pytest.mark.parametrize("token", [None, WRONG, "x"])
    def test_a_post_without_the_right_token_is_refused_401(self, server, token):
        url, _log = server
        headers = {"Authorization": "" if token is None else f"Bearer {token}"}
        status, body = post(url, INITIALIZE, headers)
        assert (status, body) == (401, refusal("token"))

    def test_get_and_delete_need_the_token_too(self, server):
        url, _log = server
        _status, found, _ = request(url, "POST", json_post(url), INITIALIZE)
        connection_id = found["acp-connection-id"]
        for method in ("GET", "DELETE"):
            headers = {
                "Host": host_of(url),
                "Accept": "text/event-stream",
                "Acp-Connection-Id": connection_id,
            }
            assert request(url, method, headers)[::2] == (401, refusal("token"))
        headers = {"Host": host_of(url), "Acp-Connection-Id": connection_id, **auth(url)}
        assert request(url, "DELETE", headers)[0] == 202

    def test_the_refusal_asks_for_a_bearer_token(self, server):
        url, _log = server
        status, found, _ = request(url, "POST", json_post(url, Authorization=""), INITIALIZE)
        assert (status, found["www-authenticate"]) == (401, 'Bearer realm="modefsm"')

    def test_a_token_in_the_query_string_is_not_accepted(self, server):
        url, _log = server
        headers = upgrade_headers(url)
        parts = urllib.parse.urlsplit(url)
        with_query = f"{parts.scheme}://{parts.netloc}{parts.path}?token={url.token}"
        assert request(with_query, "GET", headers)[::2] == (401, refusal("token"))

    @pytest.mark.parametrize("kind", ["http", "ws"])
    @pytest.mark.parametrize("version", [1, 2])
    @pytest.mark.parametrize("token", [None, WRONG])
    async def test_the_sdk_clients_without_the_token_are_refused(
        self, server, kind, version, token
    ):
        import websockets
        from acp.experimental import v2
        from acp.experimental.v2 import schema as s2
        from acp.http.client import AcpHttpStatusError

        url, _log = server
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        if kind == "ws":
            with pytest.raises(websockets.InvalidStatus) as refused:
                await transport_to(url, kind, headers)
            response = refused.value.response
            assert (response.status_code, json.loads(bytes(response.body))) == (
                401,
                refusal("token"),
            )
            return
        transport = await transport_to(url, kind, headers)
        if version == 1:
            conn: Any = acp.connect_to_agent(cast("Any", TestClient()), transport)
            initialized = conn.initialize(protocol_version=1)
        else:
            conn = v2.connect_to_agent(V2Client(), transport)
            info = s2.Implementation(name="t", version="0")
            initialized = conn.initialize(protocol_version=2, info=info)
        try:
            with pytest.raises(AcpHttpStatusError) as failed:
                await asyncio.wait_for(initialized, TIMEOUT)
        finally:
            await conn.close()
        assert failed.value.status_code == 401

    @pytest.mark.parametrize("kind", ["http", "ws"])
    async def test_the_sdk_clients_with_the_token_are_served(self, server, kind):
        url, _log = server
        async with v1_client(url, kind) as (conn, _client):
            session = await conn.new_session(cwd=".")
            await conn.set_session_mode(session_id=session.session_id, mode_id="code")
        async with v2_client(url, kind) as (conn, _client):
            assert (await conn.new_session(cwd=".")).session_id.startswith("sess_")

    async def test_a_browser_websocket_sends_the_token_as_a_subprotocol(self, server):
        url, _log = server
        offered = ["acp", f"{TOKEN_SUBPROTOCOL}{url.token}"]
        async with ws_connect(
            url, subprotocols=offered, additional_headers={"Authorization": ""}
        ) as socket:
            assert socket.subprotocol == "acp"
            assert url.token not in str(socket.response.headers)
            await socket.send(INITIALIZE.decode())
            answer = json.loads(await asyncio.wait_for(socket.recv(), TIMEOUT))
        assert (answer["id"], answer["result"]["protocolVersion"]) == (0, 1)

    async def test_a_wrong_subprotocol_token_is_refused(self, server):
        import websockets

        url, _log = server
        offered = ["acp", f"{TOKEN_SUBPROTOCOL}{WRONG}"]
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with ws_connect(
                url, subprotocols=offered, additional_headers={"Authorization": ""}
            ):
                pass
        assert refused.value.response.status_code == 401

    def test_the_token_is_in_no_log_argument_or_error(self, server):
        url, log = server
        assert url.token is not None
        post(url, INITIALIZE, {"Authorization": f"Bearer {url.token}x"})  # a near miss
        seen = [
            log.read_text(),
            *(json.dumps(refusal(rule)) for rule in ("token", "host", "origin")),
        ]
        for pid in _serve_pids():
            seen.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
            seen.append(Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace"))
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
        assert [text for text in [*seen, ps.stdout] if url.token in text] == []


def _serve_pids() -> list[int]:
    """The process ids of running `modefsm serve` processes."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"modefsm" in args and b"serve" in args:
                pids.append(int(entry.name))
    return pids


# -- the token file and the binding --------------------------------------------------------


def start(log: Path, *args: str, address: str = "127.0.0.1:0") -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "modefsm", "serve", "--http", address, "--log", str(log)]
    return subprocess.Popen([*command, *args], stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


STOPPING = "modefsm serve: SIGTERM: closing every connection and stopping\n"
"""What `modefsm serve --http` says when SIGTERM stops it."""


def stop(process: subprocess.Popen[bytes]) -> str:
    """SIGTERM, wait; the rest of stderr."""
    process.send_signal(signal.SIGTERM)
    try:
        _out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    return err.decode()


def refused_at_start(log: Path, *args: str, address: str = "127.0.0.1:0") -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "modefsm", "serve", "--http", address, "--log", str(log), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return result.returncode, result.stderr


class TestTokenFile:
    def test_the_generated_token_file_is_0600_in_a_0700_directory_and_goes_at_exit(self, log_path):
        process = start(log_path)
        assert process.stderr is not None
        url = listening(process.stderr.readline().decode())
        assert url.token_file is not None
        token_file = url.token_file
        try:
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
            assert token_file.stat().st_uid == os.geteuid()
            port = urllib.parse.urlsplit(url).port
            assert token_file.name == f"serve-{port}-{process.pid}.token"
            assert re.fullmatch(r"[A-Za-z0-9_-]{43}\n", token_file.read_text())  # 256 bits
            assert post(url, INITIALIZE)[0] == 200
        finally:
            assert stop(process) == STOPPING
        assert not token_file.exists()

    def test_two_servers_get_two_tokens(self, tmp_path):
        first, second = start(tmp_path / "a.jsonl"), start(tmp_path / "b.jsonl")
        try:
            assert first.stderr is not None
            assert second.stderr is not None
            a = listening(first.stderr.readline().decode())
            b = listening(second.stderr.readline().decode())
            assert (a.token_file != b.token_file, a.token != b.token) == (True, True)
            assert post(a, INITIALIZE, {"Authorization": f"Bearer {b.token}"})[0] == 401
        finally:
            stop(first)
            stop(second)

    def test_a_token_file_is_read_and_kept(self, tmp_path):
        token_file = tmp_path / "token"
        token_file.write_text("t" * 40 + "\n")
        token_file.chmod(0o600)
        process = start(tmp_path / "modes.jsonl", "--token-file", str(token_file))
        assert process.stderr is not None
        url = listening(process.stderr.readline().decode())
        try:
            assert (url.token_file, url.token) == (token_file, "t" * 40)
            assert post(url, INITIALIZE)[0] == 200
        finally:
            stop(process)
        assert token_file.read_text() == "t" * 40 + "\n"

    def test_a_missing_token_file_is_created_0600_whatever_the_umask(self, tmp_path):
        token_file = tmp_path / "new.token"
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "modefsm", "serve", "--http", "127.0.0.1:0"),
                *("--log", str(tmp_path / "modes.jsonl"), "--token-file", str(token_file)),
            ],
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: os.umask(0),  # noqa: PLW1509 - the child's umask only
        )
        assert process.stderr is not None
        url = listening(process.stderr.readline().decode())
        try:
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert url.token is not None
            assert len(url.token) == 43
        finally:
            stop(process)
        assert token_file.exists()  # the user's file stays

    @pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
    def test_a_token_file_others_may_read_is_refused(self, tmp_path, mode):
        token_file = tmp_path / "token"
        token_file.write_text("t" * 40)
        token_file.chmod(mode)
        code, err = refused_at_start(tmp_path / "modes.jsonl", "--token-file", str(token_file))
        expected = (
            f"modefsm serve: {token_file}: other users may read or write the token file "
            f"(mode {mode:04o}): chmod 600 it\n"
        )
        assert (code, err) == (2, expected)

    @pytest.mark.parametrize("given", [True, False], ids=["token-file", "generated"])
    def test_a_token_file_that_cannot_be_written_is_one_line_and_left_nowhere(
        self, tmp_path, given
    ):
        """No room for the token (a file size limit of 0: as a full disk, EFBIG for
        ENOSPC): one line, exit 2, and no empty token file left to refuse the next start."""
        runtime = tmp_path / "run"
        runtime.mkdir(mode=0o700)
        token_file = tmp_path / "token"
        args = ("--token-file", str(token_file)) if given else ()
        result = subprocess.run(
            [
                *("prlimit", "--fsize=0", sys.executable, "-m", "modefsm", "serve"),
                *("--http", "127.0.0.1:0", "--log", str(tmp_path / "modes.jsonl"), *args),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        )
        folder = tmp_path if given else runtime / "modefsm"
        assert (result.returncode, result.stderr.count("\n")) == (2, 1), result.stderr
        assert result.stderr.startswith(f"modefsm serve: {folder}/"), result.stderr
        assert result.stderr.endswith(": cannot write the token file: File too large\n")
        assert [p.name for p in folder.iterdir() if "token" in p.name] == []

    @pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
    def test_a_token_file_of_another_user_is_refused(self, tmp_path):
        """Another user who made the file (in a shared directory, before the server
        started) chose the token: as root (who can read any file) it must not be used."""
        token_file = tmp_path / "token"
        token_file.write_text("t" * 40)
        token_file.chmod(0o600)
        os.chown(token_file, 65534, 65534)  # nobody's
        code, err = refused_at_start(tmp_path / "modes.jsonl", "--token-file", str(token_file))
        expected = (
            f"modefsm serve: {token_file}: the token file belongs to another user "
            f"(uid 65534): only a file of this user is trusted\n"
        )
        assert (code, err) == (2, expected)

    @pytest.mark.parametrize(("content", "length"), [("short", 5), ("", 0), ("bad token " * 5, 49)])
    def test_a_token_file_without_a_token_is_refused(self, tmp_path, content, length):
        token_file = tmp_path / "token"
        token_file.write_text(content)
        token_file.chmod(0o600)
        code, err = refused_at_start(tmp_path / "modes.jsonl", "--token-file", str(token_file))
        expected = (
            f"modefsm serve: {token_file}: not a token file: a token is at least 32 "
            f"characters of A-Z a-z 0-9 . _ ~ - (this one has {length})\n"
        )
        assert (code, err) == (2, expected)


class TestBinding:
    def test_no_auth_on_loopback_says_so_and_serves_without_a_token(self, log_path):
        process = start(log_path, "--no-auth")
        assert process.stderr is not None
        warning = process.stderr.readline().decode()
        url = listening(process.stderr.readline().decode())
        try:
            assert warning == (
                "modefsm serve: --no-auth: no token; any local user or process can drive "
                "this server\n"
            )
            assert url.token is None
            assert post(url, INITIALIZE)[0] == 200
            assert post(url, INITIALIZE, {"Origin": "http://attacker.example"})[0] == 403
        finally:
            stop(process)

    @pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0"])
    def test_no_auth_on_every_interface_is_refused(self, log_path, address):
        host = address.rpartition(":")[0].strip("[]")
        assert refused_at_start(log_path, "--no-auth", address=address) == (
            2,
            f"modefsm serve: --no-auth is only for a loopback address, and {host} is not one\n",
        )
        assert not log_path.exists()

    def test_every_interface_with_a_token_warns_once(self, log_path):
        process = start(log_path, address="0.0.0.0:0")
        assert process.stderr is not None
        warning = process.stderr.readline().decode()
        url = listening(process.stderr.readline().decode())
        try:
            assert warning == (
                "modefsm serve: 0.0.0.0 is not a loopback address: every client that "
                "reaches it needs the token, and the traffic is plain HTTP (put a TLS proxy "
                "in front)\n"
            )
            local = url.replace("0.0.0.0", "127.0.0.1")  # noqa: S104 - what the server printed
            assert post(local, INITIALIZE, auth(url))[0] == 200
            assert post(local, INITIALIZE, {"Authorization": ""})[0] == 401
        finally:
            assert stop(process) == STOPPING

    @pytest.mark.parametrize(
        ("flag", "value", "message"),
        [
            (
                "--allow-origin",
                "*",
                "not an origin scheme://host[:port] (e.g. https://app.example): '*'",
            ),
            (
                "--allow-origin",
                "https://app.example/path",
                "not an origin scheme://host[:port] (e.g. https://app.example): 'https://app.example/path'",
            ),
            (
                "--allow-origin",
                "app.example",
                "not an origin scheme://host[:port] (e.g. https://app.example): 'app.example'",
            ),
            ("--allow-host", "a/b", "not HOST or HOST:PORT (e.g. agent.example.com): 'a/b'"),
            (
                "--allow-host",
                "agent:http",
                "not HOST or HOST:PORT (e.g. agent.example.com): 'agent:http'",
            ),
        ],
    )
    def test_a_malformed_allowance_is_a_usage_error(self, log_path, flag, value, message):
        code, err = refused_at_start(log_path, flag, value)
        assert (code, err.splitlines()[-1]) == (
            2,
            f"modefsm serve: error: argument {flag}: {message}",
        )

    @pytest.mark.parametrize(
        "flag",
        [
            ["--no-auth"],
            ["--token-file", "t"],
            ["--allow-origin", "http://a.example"],
            ["--allow-host", "a.example"],
        ],
    )
    def test_the_http_flags_need_http(self, tmp_path, flag):
        result = subprocess.run(
            [sys.executable, "-m", "modefsm", "serve", *flag],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert (result.returncode, result.stderr) == (
            2,
            f"modefsm serve: {flag[0]} needs --http HOST:PORT\n",
        )

    def test_allowed_origins_and_hosts_widen_the_checks(self, log_path):
        process = start(
            log_path,
            "--allow-origin",
            "https://App.Example",
            "--allow-host",
            "agent.example.com",
            "--allow-host",
            "proxy.example:8443",
        )
        assert process.stderr is not None
        url = listening(process.stderr.readline().decode())
        try:

            def status(**headers: str) -> int:
                return request(url, "POST", json_post(url, **headers), INITIALIZE)[0]

            assert status(Origin="https://app.example") == 200
            assert status(Origin="http://app.example") == 403
            assert status(Origin="https://app.example:8443") == 403
            assert status(Host="agent.example.com") == 200
            assert status(Host="agent.example.com:443") == 200
            assert status(Host="proxy.example:8443") == 200
            assert status(Host="proxy.example") == 403
            assert status(Host="other.example.com") == 403
        finally:
            stop(process)
