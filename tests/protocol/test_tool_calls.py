"""Tool calls decided by the committed mode, end to end: the official SDK clients (ACP v1
and v2) drive real `modefsm serve` processes (the permission preset) whose scripted agent
acts out the prompt's tool lines through `ModeAgent.run_tool`.

Each test compares the tool-call frames whole, the decision records the log holds, and
checks that `modefsm replay --verify` finds the log clean.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import acp
import pytest

from modefsm import MemoryStore, ModeAgent, ModeSpec, preset
from modefsm.cli._serve import MAX_TOOL_LINES, TOOL_VERBS
from tests.acp_client import select, text_block
from tests.conftest import read_log
from tests.protocol.http_wire import http_server, v1_client, verify
from tests.protocol.tool_clients import ToolClient, connect
from tests.reliability.harness import raw_serve

pytestmark = pytest.mark.e2e

VERSIONS = [pytest.param(1, id="v1"), pytest.param(2, id="v2")]

OPTIONS = [
    {"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
]
PLAN_DENIES = "Plan mode: no edits and no commands"


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": value}}]


def acted(title: str) -> str:
    return f"{title}: acted out (modefsm serve touches nothing)"


class Expect:
    """The tool-call frames of one ACP version, whole."""

    def __init__(self, version: int, session_id: str) -> None:
        self.version = version
        self.session_id = session_id

    def update(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "method": "session/update",
            "params": {"sessionId": self.session_id, "update": body},
        }

    def start(self, call_id: str, title: str, kind: str) -> dict[str, Any]:
        first = "tool_call" if self.version == 1 else "tool_call_update"
        return self.update(
            {
                "sessionUpdate": first,
                "toolCallId": call_id,
                "title": title,
                "kind": kind,
                "status": "pending",
            }
        )

    def running(self, call_id: str) -> dict[str, Any]:
        return self.update(
            {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"}
        )

    def end(self, call_id: str, status: str, content: str) -> dict[str, Any]:
        return self.update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call_id,
                "status": status,
                "content": text(content),
            }
        )

    def ran(self, call_id: str, title: str, kind: str) -> list[dict[str, Any]]:
        return [
            self.start(call_id, title, kind),
            self.running(call_id),
            self.end(call_id, "completed", acted(title)),
        ]

    def ask(self, request_id: int, call_id: str, title: str, kind: str) -> list[dict[str, Any]]:
        """The permission request (v2: between ``requires_action`` and ``running``)."""
        tool_call = {"toolCallId": call_id, "title": title, "kind": kind, "status": "pending"}
        if self.version == 1:
            params = {"sessionId": self.session_id, "toolCall": tool_call, "options": OPTIONS}
            return [{"id": request_id, "method": "session/request_permission", "params": params}]
        params = {
            "sessionId": self.session_id,
            "title": title,
            "subject": {"type": "tool_call", "toolCall": tool_call},
            "options": OPTIONS,
        }
        return [
            self.update({"sessionUpdate": "state_update", "state": "requires_action"}),
            {"id": request_id, "method": "session/request_permission", "params": params},
            self.update({"sessionUpdate": "state_update", "state": "running"}),
        ]


def tool_frames(client: ToolClient, mark: int, end: int | None = None) -> list[dict[str, Any]]:
    """The frames of the tool calls from *mark* to *end*: their updates, the permission
    requests and (v2) the ``requires_action``/``running`` state updates around them (not
    the ``running`` that starts a turn, after its ``user_message``)."""
    out = []
    previous = None
    for frame in client.since(mark)[: None if end is None else end - mark]:
        update = frame["params"]["update"] if frame.get("method") == "session/update" else {}
        kind = update.get("sessionUpdate")
        if (
            frame.get("method") == "session/request_permission"
            or kind
            in (
                "tool_call",
                "tool_call_update",
            )
            or (
                kind == "state_update"
                and update["state"] in ("requires_action", "running")
                and previous != "user_message"
            )
        ):
            out.append(frame)
        previous = kind
    return out


def call_ids(client: ToolClient, mark: int) -> list[str]:
    """The toolCallIds the agent introduced since *mark*, in order."""
    ids: list[str] = []
    for update in client.updates(mark):
        call_id = update.get("toolCallId")
        if call_id is not None and call_id not in ids:
            ids.append(call_id)
    return ids


def message(client: ToolClient, mark: int) -> str:
    """The text of the agent's message since *mark*."""
    chunks = [u for u in client.updates(mark) if u.get("sessionUpdate") == "agent_message_chunk"]
    assert len(chunks) == 1, chunks
    return str(chunks[0]["content"]["text"])


def decisions(log: Path) -> list[tuple[Any, ...]]:
    """The log's decision records: (toolCallId, kind, tool, rule, decision, outcome, mode, seq)."""
    return [
        (
            r["tool_call_id"],
            r["kind"],
            r["tool"],
            r["rule"],
            r["decision"],
            r["outcome"],
            r["mode"],
            r["mode_seq"],
        )
        for r in read_log(log)
        if r["event"] == "modefsm.tool_decided"
    ]


def assert_replay_clean(log: Path, *args: str) -> None:
    assert verify(log, *args) == "RESULT  clean"


def asked_call(request: dict[str, Any]) -> str:
    """The toolCallId of a permission request (v1 ``toolCall``, v2 ``subject.toolCall``)."""
    params = request["params"]
    call = params["toolCall"] if "toolCall" in params else params["subject"]["toolCall"]
    return str(call["toolCallId"])


def answering(*options: str | None) -> Any:
    """An answer function selecting *options* in order."""
    left = list(options)

    async def answer(params: dict[str, Any]) -> str | None:
        del params
        return left.pop(0)

    return answer


@pytest.mark.parametrize("version", VERSIONS)
class TestDecidedByTheMode:
    async def test_denied_edit_in_plan_fails_with_the_reason_and_never_runs(
        self, log_path: Path, version: int
    ):
        async with connect(log_path, "--preset", "permission", version=version) as client:
            session_id = await client.new_session()
            await client.set_mode(session_id, "plan")
            mark = client.mark()
            await client.prompt(session_id, "read README.md\nedit notes.txt")
        read, edit = call_ids(client, mark)
        expect = Expect(version, session_id)
        assert tool_frames(client, mark) == [
            *expect.ran(read, "Read README.md", "read"),
            expect.start(edit, "Edit notes.txt", "edit"),
            expect.end(edit, "failed", PLAN_DENIES),
        ]
        assert message(client, mark) == (
            f"read README.md: completed\nedit notes.txt: failed ({PLAN_DENIES})"
        )
        assert decisions(log_path) == [
            (read, "read", "read_file", 1, "allow", None, "plan", 2),
            (edit, "edit", "edit_file", 0, "deny", None, "plan", 2),
        ]
        assert_replay_clean(log_path)

    @pytest.mark.parametrize(
        ("option", "status", "content"),
        [
            ("allow_once", "completed", acted("Edit notes.txt")),
            ("reject_once", "failed", "Rejected by the user."),
        ],
    )
    async def test_asked_edit_in_default_is_settled_by_the_answer(
        self, log_path: Path, version: int, option: str, status: str, content: str
    ):
        async with connect(log_path, "--preset", "permission", version=version) as client:
            session_id = await client.new_session()
            client.answer = answering(option)
            mark = client.mark()
            await client.prompt(session_id, "edit notes.txt")
        (edit,) = call_ids(client, mark)
        expect = Expect(version, session_id)
        ends = [expect.running(edit)] if status == "completed" else []
        assert tool_frames(client, mark) == [
            expect.start(edit, "Edit notes.txt", "edit"),
            *expect.ask(0, edit, "Edit notes.txt", "edit"),
            *ends,
            expect.end(edit, status, content),
        ]
        assert decisions(log_path) == [
            (edit, "edit", "edit_file", 1, "ask", option, "default", 1),
        ]
        assert_replay_clean(log_path)

    async def test_allow_always_is_remembered_in_its_mode_and_not_in_another(
        self, log_path: Path, version: int
    ):
        async with connect(log_path, "--preset", "permission", version=version) as client:
            session_id = await client.new_session()
            client.answer = answering("allow_always", "reject_once")
            mark = client.mark()
            await client.prompt(session_id, "run ls\nrun make")
            await client.set_mode(session_id, "acceptEdits")
            again = client.mark()
            await client.prompt(session_id, "run ls")
        first, second = call_ids(client, mark)[:2]
        (third,) = call_ids(client, again)
        expect = Expect(version, session_id)
        assert tool_frames(client, mark, again) == [
            expect.start(first, "Run ls", "execute"),
            *expect.ask(0, first, "Run ls", "execute"),
            *expect.ran(first, "Run ls", "execute")[1:],
            # granted: the same tool in the same mode runs without asking
            *expect.ran(second, "Run make", "execute"),
        ]
        assert tool_frames(client, again) == [
            expect.start(third, "Run ls", "execute"),
            *expect.ask(1, third, "Run ls", "execute"),
            expect.end(third, "failed", "Rejected by the user."),
        ]
        accept_edits_asks = 1  # acceptEdits' rule 1 asks before commands
        assert decisions(log_path) == [
            (first, "execute", "run_command", 1, "ask", "allow_always", "default", 1),
            (second, "execute", "run_command", 1, "ask", "granted", "default", 1),
            (
                third, "execute", "run_command", accept_edits_asks, "ask", "reject_once",
                "acceptEdits", 2,
            ),
        ]  # fmt: skip
        assert_replay_clean(log_path)

    async def test_a_mode_change_mid_turn_governs_the_next_tool_call(
        self, log_path: Path, version: int
    ):
        async with connect(log_path, "--preset", "permission", version=version) as client:
            session_id = await client.new_session()

            async def change_then_allow(params: dict[str, Any]) -> str:
                del params
                await client.set_mode(session_id, "acceptEdits")  # execute: still asked
                return "allow_once"

            client.answer = change_then_allow
            mark = client.mark()
            await client.prompt(session_id, "run ls\nedit notes.txt")
        run, edit = call_ids(client, mark)
        expect = Expect(version, session_id)
        # the edit, asked in default, is allowed without asking in acceptEdits
        assert tool_frames(client, mark) == [
            expect.start(run, "Run ls", "execute"),
            *expect.ask(0, run, "Run ls", "execute"),
            *expect.ran(run, "Run ls", "execute")[1:],
            *expect.ran(edit, "Edit notes.txt", "edit"),
        ]
        assert decisions(log_path) == [
            (run, "execute", "run_command", 1, "ask", "allow_once", "acceptEdits", 2),
            (edit, "edit", "edit_file", 0, "allow", None, "acceptEdits", 2),
        ]
        assert_replay_clean(log_path)

    async def test_an_open_ask_is_withdrawn_when_the_mode_changes_to_one_that_denies(
        self, log_path: Path, version: int
    ):
        async with connect(log_path, "--preset", "permission", version=version) as client:
            session_id = await client.new_session()

            async def deny_by_plan(params: dict[str, Any]) -> None:
                del params
                await client.set_mode(session_id, "plan")
                # the agent withdraws its request (v1's SDK then cancels this handler)
                await client.until(lambda f: f.get("method") == "$/cancel_request")
                # a cancelled answer after the withdrawal: nothing to log

            client.answer = deny_by_plan
            mark = client.mark()
            await client.prompt(session_id, "run ls\nedit notes.txt")
        run, edit = call_ids(client, mark)
        expect = Expect(version, session_id)
        assert {"method": "$/cancel_request", "params": {"requestId": 0}} in client.since(mark)
        frames = tool_frames(client, mark)
        assert [f for f in frames if run in str(f)][-1] == expect.end(run, "failed", PLAN_DENIES)
        assert [f for f in frames if edit in str(f)] == [
            expect.start(edit, "Edit notes.txt", "edit"),
            expect.end(edit, "failed", PLAN_DENIES),
        ]
        assert message(client, mark) == (
            f"run ls: failed ({PLAN_DENIES})\nedit notes.txt: failed ({PLAN_DENIES})"
        )
        assert decisions(log_path) == [
            (run, "execute", "run_command", 0, "deny", None, "plan", 2),
            (edit, "edit", "edit_file", 0, "deny", None, "plan", 2),
        ]
        assert [r for r in read_log(log_path) if r["event"] == "modefsm.change_rejected"] == []
        assert_replay_clean(log_path)


async def test_an_answer_to_a_withdrawn_ask_is_logged_as_late_and_changes_nothing(
    log_path: Path,
):
    async with raw_serve(log_path, "--preset", "permission") as peer:
        session_id = await peer.new_session()
        peer.next_id += 1
        prompt_id = peer.next_id
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "run ls"}]}
        await peer.send(
            {"jsonrpc": "2.0", "id": prompt_id, "method": "session/prompt", "params": params}
        )
        request = await peer.next_agent_request()
        assert "result" in await peer.set_mode(session_id, "plan")
        assert (await peer.response(prompt_id))["result"] == {"stopReason": "end_turn"}
        await peer.answer(request, {"outcome": {"outcome": "selected", "optionId": "allow_once"}})
        assert await peer.current_mode(session_id) == "plan"  # one more round trip
    call = request["params"]["toolCall"]["toolCallId"]
    assert decisions(log_path) == [(call, "execute", "run_command", 0, "deny", None, "plan", 2)]
    assert [
        (r["event"], r.get("reason"), r.get("option_id"))
        for r in read_log(log_path)
        if r.get("tool_call_id") == call
    ] == [
        ("modefsm.tool_decided", None, None),
        ("modefsm.answer_dropped", "late_answer", "allow_once"),
    ]
    assert [r for r in read_log(log_path) if r["event"] == "modefsm.change_rejected"] == []
    assert_replay_clean(log_path)


PERSISTENT = """\
name = "persistent"
initial = "default"

[grants]
persist = true

[[modes]]
id = "default"
name = "Default"

[[modes.tools]]
kind = ["read"]
decision = "allow"

[[modes.tools]]
kind = ["execute"]
decision = "ask"
reason = "Default mode asks before commands"

[[modes]]
id = "careful"
name = "Careful"

[[modes.tools]]
kind = ["execute"]
decision = "ask"
reason = "Careful mode asks before commands"
"""


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_persistent_grant_survives_a_serve_restart(tmp_path: Path, version: int):
    log = tmp_path / "log.jsonl"
    spec = tmp_path / "persistent.toml"
    spec.write_text(PERSISTENT)
    async with connect(log, "--spec", str(spec), version=version) as client:
        session_id = await client.new_session()
        client.answer = answering("allow_always")
        await client.prompt(session_id, "run ls")
    async with connect(log, "--spec", str(spec), version=version) as client:
        await client.load(session_id)
        client.answer = answering("reject_once")
        mark = client.mark()
        await client.prompt(session_id, "run ls")
        await client.set_mode(session_id, "careful")
        await client.prompt(session_id, "run ls")
    granted, careful = call_ids(client, mark)
    asked = [f for f in client.since(mark) if f.get("method") == "session/request_permission"]
    assert [asked_call(f) for f in asked] == [careful]
    assert [d[3:] for d in decisions(log)] == [
        (1, "ask", "allow_always", "default", 1),
        (1, "ask", "granted", "default", 1),
        (0, "ask", "reject_once", "careful", 2),
    ]
    assert [d[0] for d in decisions(log)][1:] == [granted, careful]
    assert_replay_clean(log, "--spec", str(spec))


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_change_through_one_process_governs_the_other_processes_next_tool_call(
    tmp_path: Path, version: int
):
    store = tmp_path / "shared.jsonl"
    async with (
        connect(store, "--preset", "permission", version=version, option="--store") as one,
        connect(store, "--preset", "permission", version=version, option="--store") as two,
    ):
        session_id = await one.new_session()
        await two.load(session_id)
        await one.set_mode(session_id, "plan")
        mark = two.mark()
        await two.prompt(session_id, "edit notes.txt")
    (edit,) = call_ids(two, mark)
    expect = Expect(version, session_id)
    assert [f for f in tool_frames(two, mark) if edit in str(f)] == [
        expect.start(edit, "Edit notes.txt", "edit"),
        expect.end(edit, "failed", PLAN_DENIES),
    ]
    assert decisions(store) == [(edit, "edit", "edit_file", 0, "deny", None, "plan", 2)]
    assert_replay_clean(store)


async def _asked_edit(peer: Any) -> tuple[str, int, dict[str, Any]]:
    """A session in default whose prompt waits on the edit's permission request."""
    session_id = await peer.new_session()
    peer.next_id += 1
    params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "edit notes.txt"}]}
    await peer.send(
        {"jsonrpc": "2.0", "id": peer.next_id, "method": "session/prompt", "params": params}
    )
    request = await peer.next_agent_request()
    assert request["method"] == "session/request_permission"
    return session_id, peer.next_id, request


@pytest.mark.parametrize("how", ["session/cancel", "$/cancel_request"])
async def test_a_cancelled_turn_settles_its_ask_cancelled_and_runs_nothing(
    log_path: Path, how: str
):
    async with raw_serve(log_path, "--preset", "permission") as peer:
        session_id, prompt_id, request = await _asked_edit(peer)
        if how == "session/cancel":
            await peer.notify(how, {"sessionId": session_id})
        else:
            await peer.notify(how, {"requestId": prompt_id})
        response = await peer.response(prompt_id)
        sent = list(peer.notifications)
        await peer.answer(request, {"outcome": {"outcome": "selected", "optionId": "allow_once"}})
        # one more round trip (session/load replays the kept conversation, after `sent`)
        assert await peer.current_mode(session_id) == "default"
    if how == "session/cancel":
        assert response["result"] == {"stopReason": "cancelled"}
        text = "Cancelled: the permission request was not answered."
    else:
        assert response["error"]["code"] == -32800
        text = "Cancelled: the turn was cancelled."
    call = request["params"]["toolCall"]["toolCallId"]
    expect = Expect(1, session_id)
    tool_updates = [
        {k: v for k, v in n.items() if k != "jsonrpc"}
        for n in sent
        if n["method"] == "session/update" and n["params"]["update"].get("toolCallId") == call
    ]
    assert tool_updates == [
        expect.start(call, "Edit notes.txt", "edit"),
        expect.end(call, "failed", text),
    ]
    assert {
        "jsonrpc": "2.0",
        "method": "$/cancel_request",
        "params": {"requestId": request["id"]},
    } in peer.notifications
    assert decisions(log_path) == [(call, "edit", "edit_file", 1, "ask", "cancelled", "default", 1)]
    assert [
        r
        for r in read_log(log_path)
        if r["event"] in {"modefsm.change_rejected", "modefsm.answer_dropped"}
    ] == [dropped(session_id, request, "allow_once", "late_answer")]
    assert_replay_clean(log_path)


def dropped(
    session_id: str, request: dict[str, Any], option_id: str, reason: str
) -> dict[str, Any]:
    """The ``modefsm.answer_dropped`` line of an answer to *request* that decided nothing."""
    return {
        "session_id": session_id,
        "request_id": request["id"],
        "tool_call_id": asked_call(request),
        "option_id": option_id,
        "reason": reason,
        "spec": "permission",
        "spec_hash": preset("permission").content_hash,
        "event": "modefsm.answer_dropped",
        "level": "warning",
    }


async def test_a_second_answer_to_an_ask_decides_nothing_and_is_logged_as_dropped(
    log_path: Path,
):
    """The tool call was decided by the first answer: the second is no switch's answer."""
    async with raw_serve(log_path, "--preset", "permission") as peer:
        session_id, prompt_id, request = await _asked_edit(peer)
        await peer.answer(request, {"outcome": {"outcome": "selected", "optionId": "allow_once"}})
        assert (await peer.response(prompt_id))["result"] == {"stopReason": "end_turn"}
        # the same request id, again
        await peer.answer(request, {"outcome": {"outcome": "selected", "optionId": "reject_once"}})
        assert await peer.current_mode(session_id) == "default"  # one more round trip
    call = asked_call(request)
    assert decisions(log_path) == [
        (call, "edit", "edit_file", 1, "ask", "allow_once", "default", 1)
    ]
    assert [
        r
        for r in read_log(log_path)
        if r["event"] in {"modefsm.change_rejected", "modefsm.answer_dropped"}
    ] == [dropped(session_id, request, "reject_once", "duplicate_answer")]
    assert_replay_clean(log_path)


async def test_a_prompt_of_more_tool_lines_than_the_bound_is_refused_naming_prompt(
    log_path: Path,
):
    async with raw_serve(log_path, "--preset", "permission") as peer:
        session_id = await peer.new_session()
        text = "\n".join(["read a.txt"] * (MAX_TOOL_LINES + 1))
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        response = await peer.request("session/prompt", params)
    message = f"prompt: at most {MAX_TOOL_LINES} tool lines, not {MAX_TOOL_LINES + 1}"
    assert response["error"] == {
        "code": -32602,
        "message": message,
        "data": {"field": "prompt", "max": MAX_TOOL_LINES, "message": message},
    }
    assert [r["event"] for r in read_log(log_path)] == ["modefsm.session_created"]


async def test_prompt_for_is_the_committed_modes_prompt():
    spec = ModeSpec.from_data(
        {
            "name": "prompts",
            "initial": "plan",
            "modes": [
                {"id": "plan", "name": "Plan", "prompt": "Plan only: read, never write."},
                {"id": "code", "name": "Code"},
            ],
        }
    )
    agent = ModeAgent(spec, store=MemoryStore())
    session_id = agent.engine.new_session().session_id
    assert agent.prompt_for(session_id) == "Plan only: read, never write."
    agent.engine.change(session_id, "code", "set_mode")
    assert agent.prompt_for(session_id) is None
    with pytest.raises(acp.RequestError) as unknown:
        agent.prompt_for("sess_unknown")
    assert (unknown.value.code, unknown.value.data) == (-32002, {"uri": "sess_unknown"})


@pytest.mark.parametrize("kind", ["http", "ws"])
async def test_over_http_and_websocket_the_seed_modes_decide_the_edit(log_path: Path, kind: str):
    with http_server(log_path) as url:
        async with v1_client(url, kind) as (conn, client):
            session_id = (await conn.new_session(cwd=".")).session_id

            async def allow(options: Any, tool_call: Any) -> Any:
                del options, tool_call
                return select("allow_once")

            client.answer = allow
            await conn.prompt(session_id=session_id, prompt=[text_block("edit notes.txt")])
            await conn.set_session_mode(session_id=session_id, mode_id="architect")
            await conn.prompt(session_id=session_id, prompt=[text_block("edit notes.txt")])
    ends = [
        (u["update"]["status"], u["update"]["content"][0]["content"]["text"])
        for u in client.updates(session_id)
        if u["update"]["sessionUpdate"] == "tool_call_update" and "content" in u["update"]
    ]
    assert ends == [
        ("completed", acted("Edit notes.txt")),
        ("failed", "Architect mode designs without implementation: no edits, no commands"),
    ]
    assert [d[1:] for d in decisions(log_path)] == [
        ("edit", "edit_file", 1, "ask", "allow_once", "ask", 1),
        ("edit", "edit_file", 1, "deny", None, "architect", 2),
    ]
    assert_replay_clean(log_path)


def test_serve_help_names_the_tool_lines_and_their_bound():
    shown = subprocess.run(
        [sys.executable, "-m", "modefsm", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    text = " ".join(shown.split())
    verbs = "read PATH, edit PATH, delete PATH, move PATH, search TEXT, run COMMAND, fetch URL, "
    assert f"({verbs}think TEXT; at most {MAX_TOOL_LINES})" in text
    assert sorted(TOOL_VERBS) == sorted(v.split()[0] for v in (verbs + "think TEXT").split(", "))
