"""Bad input: malformed frames, wrong types, huge and unicode ids, unknown methods, bad specs.

One ``modefsm serve`` per test takes every example over the same stdio pipe. The
frames come from the SDK's own request models (serialized with the SDK, then mutated:
fields dropped, retyped, renamed, added; envelopes broken; ids of every JSON type and
size) and from raw byte mutations of valid frames. The oracle is JSON-RPC 2.0 itself:

- a line that is not JSON (or not Unicode text) gets one ``-32700`` with id ``null``;
- a line that is JSON but no JSON-RPC frame gets one ``-32600``, with its id if it has
  one JSON-RPC allows (id ``null`` for a bad id type, or a string id longer than
  ``MAX_ID_CHARS``); one with a lone surrogate gets ``-32700``, with its id likewise;
- every request with a valid id gets exactly one answer with that id, never ``-32603``;
- notifications and responses never get an answer;

and after every example the agent still answers, the session's mode is unchanged, and
the log holds no ``modefsm.mode_changed`` record at all.
"""

from __future__ import annotations

import json
import queue
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from acp import schema
from acp.utils import serialize_params
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from modefsm import preset
from modefsm.cli._main import main
from modefsm.errors import SpecError
from modefsm.spec._model import ModeSpec, load_spec

from .harness import TIMEOUT, read_log, soak_factor, strict_loads

pytestmark = [pytest.mark.reliability, pytest.mark.e2e]

EXAMPLES = 250
SEED = preset("seed")
FIXED = "sess_fixture"  # replaced by the live session's id
ALLOWED_CODES = {-32700, -32600, -32601, -32602, -32002}
STATE_CHANGING = {"session/set_mode", "session/set_config_option", "session/close", "session/new"}

fuzz_settings = settings(
    max_examples=EXAMPLES * soak_factor(),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=soak_factor() == 1,  # the suite is repeatable; a soak explores
)


# -- a synchronous peer: hypothesis examples are synchronous --------------------------------


class SyncPeer:
    """``modefsm serve`` over pipes, read by a thread; every output line parsed strictly."""

    def __init__(self, log: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "modefsm", "serve", "--log", str(log)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        self.probes = 0
        self.stash: list[dict[str, Any]] = []  # read while waiting for a probe
        self.session_id = self.call("session/new", {"cwd": ".", "mcpServers": []})["sessionId"]

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = strict_loads(line)
                assert isinstance(message, dict)
                assert message.get("jsonrpc") == "2.0"
            except BaseException as exc:  # reported by the test thread
                self.errors.append(exc)
                return
            self.lines.put(message)

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def call(self, method: str, params: Any) -> Any:
        self.probes += 1
        probe = f"probe-{self.probes}"
        self.write(
            json.dumps({"jsonrpc": "2.0", "id": probe, "method": method, "params": params}).encode()
            + b"\n"
        )
        while True:
            message = self._get()
            if message.get("id") == probe:
                assert "result" in message, message
                return message["result"]
            self.stash.append(message)

    def next(self) -> dict[str, Any]:
        """The next message not yet consumed."""
        if self.stash:
            return self.stash.pop(0)
        return self._get()

    def _get(self) -> dict[str, Any]:
        try:
            return self.lines.get(timeout=TIMEOUT)
        except queue.Empty:
            assert not self.errors, self.errors
            assert self.process.poll() is None, f"modefsm serve exited {self.process.returncode}"
            pytest.fail("modefsm serve answered nothing in time: a hang")

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(TIMEOUT)
        self.thread.join(TIMEOUT)
        assert self.process.stdout is not None
        self.process.stdout.close()
        assert not self.errors, self.errors
        return code


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[SyncPeer]:
    log = tmp_path / "log.jsonl"
    agent = SyncPeer(log)
    try:
        yield agent
        assert agent.close() == 0
    finally:
        if agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait()
    contents = read_log(log)
    assert [r["event"] for r in contents.records].count("modefsm.mode_changed") == 0
    assert contents.sessions()[0] == agent.session_id


# -- the oracle: what JSON-RPC 2.0 says the answer to one line is ----------------------------


def lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(lone_surrogate(k) or lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(lone_surrogate(v) for v in value)
    return False


def valid_id(value: Any) -> bool:
    from modefsm.protocol.transport._stdio import MAX_ID_CHARS

    return (
        value is None
        or (isinstance(value, str) and len(value) <= MAX_ID_CHARS)
        or type(value) is int  # ACP ids: no fractions (JSON-RPC would allow them)
    )


def expect(line: bytes) -> tuple[str, Any]:  # noqa: PLR0911 - one return per JSON-RPC rule
    """``("none", None)``, ``("null", code)`` or ``("id", id)`` for one line."""
    if not line.strip():
        return ("none", None)
    try:
        frame = strict_loads(line)
    except (ValueError, RecursionError):
        return ("null", -32700)
    if not isinstance(frame, dict):
        return ("null", -32600)
    is_request = "method" in frame and "id" in frame
    is_other = "method" in frame or "result" in frame or "error" in frame
    if is_other and not is_request:  # a notification or a response: never answered
        return ("none", None)
    known = "id" in frame and valid_id(frame["id"]) and not lone_surrogate(frame["id"])
    if lone_surrogate(frame):
        return ("id", frame["id"]) if known else ("null", -32700)
    if known:  # a request, or a frame of no known kind: its id can be read
        return ("id", frame["id"])
    return ("null", -32600)


def changes_state(line: bytes, session_id: str) -> bool:
    """Whether *line* is a valid request that may change the live session's state."""
    try:
        frame = strict_loads(line)
    except (ValueError, RecursionError):
        return False
    if not isinstance(frame, dict) or not isinstance(frame.get("method"), str):
        return False
    if frame["method"] not in STATE_CHANGING:
        return False
    params = frame.get("params")
    if frame["method"] == "session/new":
        return True
    if not isinstance(params, dict) or params.get("sessionId") != session_id:
        return False
    value = params.get("modeId", params.get("value"))
    return frame["method"] == "session/close" or (value in SEED.mode_ids and value != "ask")


def exchange(peer: SyncPeer, lines: list[bytes]) -> None:
    """Send *lines*, then check every answer against the oracle, and that nothing changed."""
    expected_ids: Counter[str] = Counter()
    expected_nulls = 0
    for line in lines:
        kind, value = expect(line)
        if kind == "id" and value is not None:
            expected_ids[json.dumps(value, sort_keys=True)] += 1
        elif kind in {"id", "null"}:
            expected_nulls += 1
    peer.write(b"".join(line + b"\n" for line in lines))
    mode = peer.call("session/load", {"cwd": ".", "sessionId": peer.session_id, "mcpServers": []})
    assert mode["modes"]["currentModeId"] == "ask"
    got_ids: Counter[str] = Counter()
    got_nulls = 0
    while got_ids != expected_ids or got_nulls < expected_nulls:
        message = peer.next()
        if "method" in message:
            continue  # a notification (a prompt's message) or a request of the agent
        if "error" in message:
            assert message["error"]["code"] in ALLOWED_CODES, message
        key = json.dumps(message["id"], sort_keys=True)
        if message["id"] is None:
            got_nulls += 1
            assert got_nulls <= expected_nulls, ("an unexpected answer", message, lines)
        else:
            got_ids[key] += 1
            assert got_ids[key] <= expected_ids[key], ("an unexpected answer", message, lines)


# -- strategies built from the SDK's request models ------------------------------------------


def huge_text(low: int, high: int) -> st.SearchStrategy[str]:
    """Long strings (past what hypothesis draws char by char): a drawn piece, repeated."""
    return st.builds(
        lambda piece, n: (piece * n)[:n], st.text(min_size=1, max_size=8), st.integers(low, high)
    )


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
ids = (
    st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | huge_text(10_000, 20_000)
    | st.sampled_from(["", "\u0000", "\U0001f600" * 50, "\u202eevil", "id\nwith newline", "\ud83d"])
    | st.none()
    | st.booleans()
    | st.lists(json_scalars, max_size=3)
    | st.dictionaries(st.text(max_size=5), json_scalars, max_size=3)
)


def base_requests(session_id: str) -> list[tuple[str, dict[str, Any]]]:
    """One valid, harmless request of each agent method, serialized by the SDK."""
    text = schema.TextContentBlock(type="text", text="hello")
    models: list[tuple[str, Any]] = [
        ("initialize", schema.InitializeRequest(protocol_version=1)),
        ("session/set_mode", schema.SetSessionModeRequest(session_id=session_id, mode_id="ask")),
        (
            "session/set_config_option",
            schema.SetSessionConfigOptionSelectRequest(
                session_id=session_id, config_id="mode", value="ask"
            ),
        ),
        ("session/prompt", schema.PromptRequest(session_id=session_id, prompt=[text])),
        (
            "session/load",
            schema.LoadSessionRequest(cwd=".", session_id=session_id, mcp_servers=[]),
        ),
        ("session/resume", schema.ResumeSessionRequest(cwd=".", session_id=session_id)),
        ("session/close", schema.CloseSessionRequest(session_id="sess_not_this_one")),
        ("session/cancel", schema.CancelNotification(session_id=session_id)),
        ("session/new", schema.NewSessionRequest(cwd=".", mcp_servers=[])),
        ("authenticate", schema.AuthenticateRequest(method_id="none")),
        ("session/list", schema.ListSessionsRequest()),
        ("session/fork", schema.ForkSessionRequest(cwd=".", session_id=session_id)),
    ]
    return [(method, serialize_params(model)) for method, model in models]


METHODS = st.sampled_from(
    [
        "session/set_mode",
        "session/set_config_option",
        "session/prompt",
        "session/load",
        "session/unknown",
        "_modefsm/ext",
        "",
        "SESSION/SET_MODE",
        "session/set_mode ",
        "\u0000",
        "x" * 5000,
    ]
)


def snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def break_params(draw: st.DrawFn, how: str, params: dict[str, Any]) -> None:
    """Break the request's params in place in the way *how* names."""
    keys = sorted(params)
    if how == "drop_field" and keys:
        del params[draw(st.sampled_from(keys))]
    elif how == "retype_field" and keys:
        params[draw(st.sampled_from(keys))] = draw(json_values)
    elif how == "add_field":
        params[draw(st.text(min_size=1, max_size=10))] = draw(json_values)
    elif how == "rename_field" and keys:
        key = draw(st.sampled_from(keys))
        params[snake(key)] = params.pop(key)
    elif how == "session":
        params["sessionId"] = draw(st.text(max_size=30) | huge_text(5000, 6000) | json_values)
    elif how == "mode":
        params["modeId" if "modeId" in params else "value"] = draw(
            st.text(max_size=30)
            | st.sampled_from(["ASK", " ask", "ask\u0000", "Code"])
            | json_values
        )


def break_envelope(draw: st.DrawFn, how: str, frame: dict[str, Any]) -> None:
    """Break the frame around the params in the way *how* names."""
    if how == "method":
        frame["method"] = draw(METHODS | json_values)
    elif how == "jsonrpc":
        frame["jsonrpc"] = draw(st.sampled_from(["1.0", "2", "2.0 ", 2.0, None]) | json_values)
        if draw(st.booleans()):
            del frame["jsonrpc"]
    elif how == "params":
        frame["params"] = draw(json_values)
        if draw(st.booleans()):
            del frame["params"]
    elif how == "notification":
        frame.pop("id", None)
    elif how == "drop_id":
        frame.pop("id", None)
        frame.pop("method", None)


PARAM_BREAKS = ["drop_field", "retype_field", "add_field", "rename_field", "session", "mode"]
ENVELOPE_BREAKS = ["method", "jsonrpc", "params", "notification", "drop_id"]


@st.composite
def model_frames(draw: st.DrawFn, session_id: str) -> bytes:
    """A request built by the SDK, then broken in one to three ways."""
    method, params = draw(st.sampled_from(base_requests(session_id)))
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": draw(ids), "method": method, "params": params}
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(PARAM_BREAKS + ENVELOPE_BREAKS))
        if how in PARAM_BREAKS:
            if isinstance(frame.get("params"), dict):
                break_params(draw, how, frame["params"])
        else:
            break_envelope(draw, how, frame)
    encoded = json.dumps(frame, ensure_ascii=draw(st.booleans()))
    return encoded.encode("utf-8", "surrogatepass")


@st.composite
def byte_mutations(draw: st.DrawFn, session_id: str) -> list[bytes]:
    """A valid frame's bytes, mutated: flips, inserts, deletes, cuts, tokens, newlines."""
    method, params = draw(st.sampled_from(base_requests(session_id)))
    data = bytearray(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": draw(st.integers(0, 10**6)),
                "method": method,
                "params": params,
            }
        ).encode()
    )
    tokens = [
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"1e400",
        b'"\\ud800"',
        b"\xff\xfe",
        b"\xc0\x80",
        b"\xed\xa0\x80",
        b"[",
        b"{",
        b"}",
        b"]",
        b",",
        b":",
        b'"',
        b"\\",
        b"null",
        b"\x00",
        b"\n",
    ]
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 6))):
        op = rng.choice(["flip", "insert", "delete", "cut", "token", "repeat"])
        at = rng.randrange(len(data) + 1) if data else 0
        if op == "flip" and data:
            at = min(at, len(data) - 1)
            data[at] ^= 1 << rng.randrange(8)
        elif op == "insert":
            data[at:at] = bytes([rng.randrange(256)])
        elif op == "delete" and data:
            del data[at : at + rng.randrange(1, 8)]
        elif op == "cut":
            del data[at:]
        elif op == "token":
            data[at:at] = rng.choice(tokens)
        elif op == "repeat" and data:
            end = min(len(data), at + rng.randrange(1, 30))
            data[at:at] = data[at:end]
    return bytes(data).split(b"\n")


# -- the fuzz tests ------------------------------------------------------------------------


class TestFrames:
    """Every malformed frame is answered as JSON-RPC says, and nothing changes."""

    @fuzz_settings
    @given(data=st.data())
    def test_mutated_sdk_requests(self, peer: SyncPeer, data: st.DataObject):
        lines = data.draw(st.lists(model_frames(peer.session_id), min_size=1, max_size=4))
        assume(not any(changes_state(line, peer.session_id) for line in lines))
        exchange(peer, lines)

    @fuzz_settings
    @given(data=st.data())
    def test_byte_mutations_of_valid_frames(self, peer: SyncPeer, data: st.DataObject):
        lines = data.draw(byte_mutations(peer.session_id))
        assume(not any(changes_state(line, peer.session_id) for line in lines))
        exchange(peer, lines)

    @pytest.mark.parametrize(
        "line",
        [
            b"[1,2]",
            b"[]",
            b"5",
            b"null",
            b'"frame"',
            b"not json",
            b"\xff\xfe\xfd",
            b'{"jsonrpc":"2.0","id":1,"method":null}',
            b'{"jsonrpc":"2.0","id":2,"method":["session/new"]}',
            b'{"jsonrpc":"2.0","id":NaN,"method":"session/new","params":{"cwd":".","mcpServers":[]}}',
            b'{"jsonrpc":"2.0","id":1e400,"method":"initialize","params":{"protocolVersion":1}}',
            b'{"jsonrpc":"2.0","id":{"a":1},"method":"session/new","params":{"cwd":".","mcpServers":[]}}',
            b'{"jsonrpc":"2.0","id":true,"method":"initialize","params":{"protocolVersion":1}}',
            b'{"id":3,"method":"session/new","params":{"cwd":".","mcpServers":[]}}',
            b'{"jsonrpc":"2.0","id":4,"method":"initialize","params":7}',
            b'{"jsonrpc":"2.0","id":5,"method":"session/set_mode","params":{"sessionId":"\\ud800","modeId":"x"}}',
            b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"nope"}',
            b'{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":1}}{"x":1}',
            b"{}",
            b'{"jsonrpc":"2.0","id":[1],"result":{}}',
            b'{"jsonrpc":"2.0","id":7}',
            b'{"jsonrpc":"2.0","id":8,"method":"initialize","params":{"_meta":'
            + b'{"a":' * 200
            + b"1"
            + b"}" * 200
            + b"}}",
            b"[" * 100_000 + b"]" * 100_000,
        ],
        ids=lambda line: line[:40].decode("utf-8", "replace"),
    )
    def test_known_bad_frames(self, peer: SyncPeer, line: bytes):
        exchange(peer, [line])

    def test_a_huge_id_and_a_huge_frame_are_answered(self, peer: SyncPeer):
        huge_id = "\U0001f600" * 200_000
        big = {
            "cwd": ".",
            "sessionId": "sess_nope",
            "mcpServers": [],
            "_meta": {"x": "y" * 5_000_000},
        }
        frame = {"jsonrpc": "2.0", "id": huge_id, "method": "session/load", "params": big}
        exchange(peer, [json.dumps(frame).encode()])

    def test_a_frame_over_the_size_limit_is_refused_and_skipped(self, peer: SyncPeer):
        from modefsm.protocol.transport._stdio import MAX_FRAME_BYTES

        line = (
            b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"'
            + b"a" * MAX_FRAME_BYTES
            + b'"}}'
        )
        peer.write(line + b"\n")
        answer = peer.next()
        assert (answer["id"], answer["error"]["code"]) == (1, -32600)  # its id, read at its start
        exchange(peer, [b'{"jsonrpc":"2.0","id":2,"method":"nope"}'])


# -- mutated spec files ----------------------------------------------------------------------


def spec_texts() -> dict[str, str]:
    from importlib import resources

    texts = {}
    for name in ("seed", "permission", "sandbox"):
        toml = resources.files("modefsm.spec.presets").joinpath(f"{name}.toml").read_text("utf-8")
        texts[f"{name}.toml"] = toml
        texts[f"{name}.json"] = json.dumps(preset(name).model_dump(mode="json"), indent=1)
    return texts


SPECS = spec_texts()


def replace_node(data: Any, rng: random.Random, value: Any) -> Any:
    """*data* with one random node replaced by *value*."""
    if isinstance(data, dict) and data and rng.random() < 0.7:
        key = rng.choice(sorted(data))
        return {**data, key: replace_node(data[key], rng, value)}
    if isinstance(data, list) and data and rng.random() < 0.7:
        at = rng.randrange(len(data))
        return [*data[:at], replace_node(data[at], rng, value), *data[at + 1 :]]
    return value


@st.composite
def mutated_specs(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(SPECS)))
    rng = random.Random(draw(st.integers(0, 2**32)))
    text = SPECS[name]
    if name.endswith(".json") and draw(st.booleans()):
        data = json.loads(text)
        for _ in range(draw(st.integers(1, 3))):
            data = replace_node(
                data, rng, draw(json_values | st.sampled_from(["ask", "code", "default"]))
            )
        return name, json.dumps(data).encode("utf-8", "surrogatepass")
    raw = bytearray(text.encode())
    for _ in range(draw(st.integers(1, 5))):
        at = rng.randrange(len(raw))
        op = rng.choice(["flip", "delete", "insert", "duplicate"])
        if op == "flip":
            raw[at] ^= 1 << rng.randrange(8)
        elif op == "delete":
            del raw[at : at + rng.randrange(1, 20)]
        elif op == "insert":
            raw[at:at] = rng.choice(
                [b"\xff", b"[", b"]", b'"', b"=", b"\n", b"{", b"}", b"ask", b"1"]
            )
        else:
            end = min(len(raw), at + rng.randrange(1, 80))
            raw[at:at] = raw[at:end]
    return name, bytes(raw)


class TestSpecFiles:
    """A mutated spec file is a valid spec or one clear SpecError; serve exits 2 on it."""

    @fuzz_settings
    @given(spec=mutated_specs())
    def test_mutated_spec_loads_or_fails_clearly(self, tmp_path: Path, spec, capsys):
        name, data = spec
        path = tmp_path / name
        path.write_bytes(data)
        try:
            loaded = load_spec(path)
        except SpecError as exc:
            message = str(exc)
        else:
            assert isinstance(loaded, ModeSpec)
            assert loaded.content_hash.startswith("sha256:")
            return
        assert message.startswith(f"{path}: ")
        capsys.readouterr()
        assert main(["serve", "--spec", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith(f"modefsm serve: {path}: ")
        if message.isprintable():
            assert err == f"modefsm serve: {message}\n"

    @pytest.mark.parametrize(
        ("name", "text"),
        [
            ("self.json", '{"self": 1}'),
            ("deep.json", "[" * 100_000 + "]" * 100_000),
            ("deep.toml", "a = " + "[" * 100_000 + "]" * 100_000),
            ("surrogate.json", '{"name":"\\ud800","initial":"a","modes":[{"id":"a","name":"A"}]}'),
            (
                "nan.json",
                '{"name":"x","initial":"a","modes":[{"id":"a","name":"A","description":NaN}]}',
            ),
            ("list.json", "[1, 2]"),
            ("binary.toml", "\udcff"),
            ("empty.toml", ""),
            ("newline-key.json", '{"\\n": null}'),
            ("newline-id.json", '{"name":"x","initial":"a\\nb","modes":[{"id":"a","name":"A"}]}'),
        ],
    )
    def test_serve_with_a_broken_spec_prints_one_line_and_exits_2(self, tmp_path: Path, name, text):
        path = tmp_path / name
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        result = subprocess.run(
            [sys.executable, "-m", "modefsm", "serve", "--spec", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 2, result.stderr
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"modefsm serve: {path}: ")
        assert "Traceback" not in result.stderr


class TestRejectionRecords:
    """Invalid input is logged as a rejection, and a huge value cannot bloat the log."""

    def test_a_huge_unknown_mode_is_logged_short(self, peer: SyncPeer, tmp_path: Path):
        huge = "m" * 1_000_000
        params = {"sessionId": peer.session_id, "modeId": huge}
        frame = {"jsonrpc": "2.0", "id": 1, "method": "session/set_mode", "params": params}
        exchange(peer, [json.dumps(frame).encode()])
        log = (tmp_path / "log.jsonl").read_bytes()
        assert len(log) < 4096, len(log)
        rejected = [json.loads(line) for line in log.splitlines()][-1]
        assert rejected["event"] == "modefsm.change_rejected"
        assert rejected["reason"] == "unknown_mode"
        assert rejected["to_mode"].startswith("m" * 100)
        assert rejected["to_mode"].endswith("[+999744 chars]")
