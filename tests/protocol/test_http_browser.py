"""A web page in the user's browser cannot drive `modefsm serve --http`.

Headless Chromium opens a page served by this test from another origin
(``http://127.0.0.2:PORT``, or a loopback origin without the token). Its script does what
any page can: ``fetch`` a ``POST initialize`` (then ``session/new``) and open
``new WebSocket(ws://127.0.0.1:PORT/acp, ["acp", "modefsm.token.TOKEN"])`` (then
``initialize`` and ``session/new``), and reports what it saw to the test. The browser's
own rules decide (its CORS preflight, its WebSocket handshake): no header is made by hand.
The page even knows the token, as a page never should; the Origin check alone stops it.
The same page from an origin given with ``--allow-origin`` gets in, so the page's attempts
are real. The server's log tells whether a session was made.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.diagram._diagram_support import chromium
from tests.protocol.http_wire import Served, end, http_server

pytestmark = pytest.mark.e2e

PAGE = """<!doctype html>
<meta charset="utf-8">
<title>any page</title>
<script>
const target = TARGET, token = TOKEN;
const frame = (id, method, params) => JSON.stringify({jsonrpc: "2.0", id, method, params});
const init = frame(0, "initialize", {protocolVersion: 1});
const create = frame(1, "session/new", {cwd: "/", mcpServers: []});
const report = {};

async function overFetch() {
  const headers = {"Content-Type": "application/json"};
  if (token) headers.Authorization = "Bearer " + token;
  try {
    const first = await fetch(target, {method: "POST", headers, body: init});
    report.fetch = {status: first.status, body: await first.json()};
    const id = first.headers.get("Acp-Connection-Id");
    if (id) {
      const second = await fetch(target, {
        method: "POST", headers: {...headers, "Acp-Connection-Id": id}, body: create});
      report.fetchNew = second.status;
    }
  } catch (error) {
    report.fetch = {error: error.name + ": " + error.message};
  }
}

function overWebSocket() {
  return new Promise((resolve) => {
    const seen = [];
    const offered = token ? ["acp", "modefsm.token." + token] : [];
    const socket = new WebSocket(target.replace("http://", "ws://"), offered);
    socket.onopen = () => { seen.push("open " + socket.protocol); socket.send(init); };
    socket.onmessage = (message) => {
      const answer = JSON.parse(message.data);
      seen.push("answer " + answer.id);
      if (answer.id === 0) socket.send(create);
      if (answer.id === 1) socket.close(1000);
    };
    socket.onerror = () => seen.push("error");
    socket.onclose = (event) => resolve({seen, code: event.code});
  });
}

(async () => {
  await overFetch();
  report.websocket = await overWebSocket();
  await fetch("/report", {method: "POST", body: JSON.stringify(report)});
})();
</script>
"""


class Page:
    """The page's server on *host*: ``origin``, what it attacks (:meth:`aim`), its report."""

    def __init__(self, host: str) -> None:
        self.target = ""
        self.token: str | None = None
        self.reports: list[Any] = []
        self.arrived = threading.Event()
        page = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = PAGE.replace("TARGET", json.dumps(page.target))
                body = body.replace("TOKEN", json.dumps(page.token))
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                page.reports.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()
                page.arrived.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.origin = f"http://{host}:{self.server.server_address[1]}"

    def aim(self, target: str, token: str | None) -> None:
        self.target, self.token = target, token

    def report(self, timeout: float) -> Any:
        assert self.arrived.wait(timeout), "the page never reported"
        return self.reports[0]


@contextlib.contextmanager
def page_server(host: str) -> Iterator[Page]:
    page = Page(host)
    thread = threading.Thread(target=page.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield page
    finally:
        page.server.shutdown()
        page.server.server_close()


@contextlib.contextmanager
def browser(url: str, profile: Path) -> Iterator[None]:
    """Headless Chromium showing *url* until the block ends."""
    process = subprocess.Popen(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        end(process, 30)


def visit(page: Page, url: Served, tmp_path: Path, *, token: str | None) -> Any:
    """What *page* saw of the server at *url*, opened in the browser."""
    page.aim(url, token)
    with browser(page.origin + "/", tmp_path / "profile"):
        return page.report(90)


def sessions_made(log: Path) -> int:
    if not log.exists():
        return 0
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    return events.count("modefsm.session_created")


TOKEN_REFUSED = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {
        "code": -32000,
        "message": "Authentication required",
        "data": {
            "details": (
                "a bearer token is required: Authorization: Bearer TOKEN (a WebSocket may "
                "instead offer the subprotocols acp and modefsm.token.TOKEN)"
            ),
            "rule": "token",
        },
    },
}


def test_a_page_of_another_origin_is_refused_even_with_the_token(tmp_path):
    log = tmp_path / "modes.jsonl"
    with page_server("127.0.0.2") as page, http_server(log) as url:
        seen = visit(page, url, tmp_path, token=url.token)
    assert seen == {
        "fetch": {"error": "TypeError: Failed to fetch"},  # its CORS preflight got 403
        "websocket": {"seen": ["error"], "code": 1006},  # the upgrade got 403
    }
    assert sessions_made(log) == 0


def test_a_loopback_page_without_the_token_is_refused(tmp_path):
    log = tmp_path / "modes.jsonl"
    with page_server("localhost") as page, http_server(log) as url:
        seen = visit(page, url, tmp_path, token=None)
    assert seen == {
        "fetch": {"status": 401, "body": TOKEN_REFUSED},  # a loopback origin may read it
        "websocket": {"seen": ["error"], "code": 1006},
    }
    assert sessions_made(log) == 0


def test_the_same_page_from_an_allowed_origin_with_the_token_gets_in(tmp_path):
    log = tmp_path / "modes.jsonl"
    with page_server("127.0.0.2") as page, http_server(log, "--allow-origin", page.origin) as url:
        seen = visit(page, url, tmp_path, token=url.token)
    assert seen["fetch"]["status"] == 200
    assert seen["fetch"]["body"]["result"]["protocolVersion"] == 1
    assert seen["fetchNew"] == 202
    assert seen["websocket"] == {
        "seen": ["open acp", "answer 0", "answer 1"],
        "code": 1000,
    }
    assert sessions_made(log) == 2
