"""The ACP SDK by need: the engine without it, the v1 adapter on SDK 0.12 and 1.0.

Every test here is marked ``sdk_compat``: the suite runs it on SDK 1.0, and ``.ci/run``
runs it again in a second environment with the SDK 0.12 (``MODEFSM_SDK_COMPAT=required``
there). Where the two releases differ, each test asserts the exact outcome of the one
installed (``HAS_V2``: SDK 1.0).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any, cast

import acp
import orjson
import pytest
from packaging.requirements import Requirement

from modefsm.protocol import SDK_VERSION, SUPPORTED_PROTOCOLS, SdkFeatureError, create_app
from modefsm.protocol._sdk import HAS_V2
from tests.acp_client import TIMEOUT, TestClient, host_command, spawn_v1, start_serve, text_block

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.sdk_compat

REQUIRED = os.environ.get("MODEFSM_SDK_COMPAT") == "required"
"""Set by ``.ci/run``'s SDK 0.12 run: a test for 0.12 fails there instead of skipping."""


def _needs_sdk_012() -> None:
    if hasattr(acp, "text_block"):
        return
    if REQUIRED:
        pytest.fail(f"MODEFSM_SDK_COMPAT=required, but the SDK is {SDK_VERSION}, not 0.12")
    pytest.skip(f"the SDK 0.12 helpers are not in SDK {SDK_VERSION} (.ci/run's 0.12 run)")


def _run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


class TestDependencies:
    def test_the_base_install_has_no_sdk_and_no_extra_of_the_adapter_a_pre_release(self):
        project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        base = [Requirement(r).name for r in project["dependencies"]]
        assert "agent-client-protocol" not in base
        extras = project["optional-dependencies"]
        assert [str(Requirement(r).specifier) for r in extras["acp"]] == ["<2,>=0.12.1"]
        for name in ("v2", "http"):  # the features that need SDK 1.0 name it
            sdk = [Requirement(r) for r in extras[name] if r.startswith("agent-client-protocol")]
            assert [str(r.specifier) for r in sdk] == ["<2,>=1.0.0rc3"]

    def test_without_the_sdk_the_engine_works_and_serve_and_demo_say_what_to_install(
        self, tmp_path: Path
    ):
        """``acp`` made unimportable in a fresh interpreter, as in the base install."""
        code = textwrap.dedent(
            """
            import sys
            sys.modules["acp"] = None  # the base install: no ACP SDK
            from modefsm import FileStore, ModeEngine, preset
            from modefsm.cli import main

            engine = ModeEngine(preset("seed"), store=FileStore(sys.argv[1]))
            engine.new_session("s1")
            print(engine.get("s1").state, main(["replay", sys.argv[1]]) == 0)
            sys.stdout.flush()
            sys.exit(main(sys.argv[2:]))
            """
        )
        asked = {  # the extra that brings what the command line asks for
            ("serve",): "acp",
            ("demo",): "acp",
            ("serve", "--protocol", "both"): "acp",
            ("serve", "--protocol", "2"): "v2",
            ("demo", "--protocol", "2"): "v2",
            ("serve", "--http", "127.0.0.1:0"): "http",
            ("serve", "--http", "127.0.0.1:0", "--protocol", "2"): "http",
        }
        for n, (args, extra) in enumerate(asked.items()):
            done = _run(str(tmp_path / f"{n}.jsonl"), *args, code=code)
            assert (done.stdout.splitlines()[-1], done.returncode) == ("ask True", 2)
            assert done.stderr == (
                f"modefsm {args[0]}: the ACP SDK (agent-client-protocol) is not installed: "
                f"pip install 'modefsm[{extra}]'\n"
            )


class TestFeaturesOfSdk10:
    def test_the_error_names_the_feature_the_release_and_the_extra(self):
        error = SdkFeatureError("serve --http", "http")
        assert isinstance(error, ImportError)
        assert str(error) == (
            f"serve --http needs agent-client-protocol>=1.0.0rc3 (installed: {SDK_VERSION}): "
            "pip install 'modefsm[http]'"
        )

    def test_v2_and_http_on_the_command_line(self, tmp_path: Path):
        """SDK 1.0 serves both versions; on 0.12 asking for v2 or HTTP is one line, exit 2."""
        assert SUPPORTED_PROTOCOLS == ((1, 2) if HAS_V2 else (1,))
        if HAS_V2:
            return  # served and tested by the rest of the suite
        log = str(tmp_path / "l.jsonl")
        asked = {
            ("serve", "--protocol", "2", "--log", log): "ACP v2 (--protocol 2)",
            ("serve", "--http", "127.0.0.1:0", "--log", log): "the HTTP transport (--http)",
            ("demo", "--protocol", "2", "--log", log): "ACP v2 (--protocol 2)",
        }
        for args, feature in asked.items():
            done = _run("-m", "modefsm", *args)
            extra = "http" if "--http" in args else "v2"
            assert (done.returncode, done.stdout, done.stderr) == (
                2,
                "",
                (
                    f"modefsm {args[0]}: {feature} needs agent-client-protocol>=1.0.0rc3 "
                    f"(installed: {SDK_VERSION}): pip install 'modefsm[{extra}]'\n"
                ),
            )
        done = _run(code="import modefsm.protocol.v2")
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1] == (
            "modefsm.protocol._sdk.SdkFeatureError: modefsm.protocol.v2 (ACP v2) needs "
            f"agent-client-protocol>=1.0.0rc3 (installed: {SDK_VERSION}): "
            "pip install 'modefsm[v2]'"
        )

    def test_the_http_transport_in_python(self):
        """``create_app`` (behind ``serve_http``): an ASGI app on 1.0, one line on 0.12."""
        if HAS_V2:
            assert callable(create_app(lambda connection: None, token=None))
            return
        with pytest.raises(SdkFeatureError) as refused:
            create_app(lambda connection: None, token=None)
        assert str(refused.value) == (
            "the HTTP transport (create_app, serve_http) needs agent-client-protocol>=1.0.0rc3 "
            f"(installed: {SDK_VERSION}): pip install 'modefsm[http]'"
        )

    async def test_a_v2_client_is_answered_the_version_served(self, tmp_path: Path):
        """ACP: the agent answers the highest version it supports up to the one asked."""
        process = await start_serve(tmp_path / "l.jsonl")
        stdin, stdout = cast("Any", process.stdin), cast("Any", process.stdout)
        asked = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
        params = {"protocolVersion": 2, "capabilities": {}, "info": {"name": "t", "version": "1"}}
        stdin.write(orjson.dumps({**asked, "params": params}) + b"\n")
        try:
            answer = orjson.loads(await asyncio.wait_for(stdout.readline(), TIMEOUT))
        finally:
            stdin.close()
            await asyncio.wait_for(process.wait(), TIMEOUT)
        assert answer["result"]["protocolVersion"] == (2 if HAS_V2 else 1)
        assert process.returncode == 0


AGENT_012 = '''\
"""An agent written against SDK 0.12, as deepagents-acp is, with modefsm for its modes."""

import asyncio
import sys

from acp import text_block, update_agent_message  # SDK 0.12's helpers (1.0 removed them)
from acp.schema import PromptResponse

from modefsm import FileStore, ModeAgent, preset, run_agent


class Agent(ModeAgent):
    async def prompt(self, prompt, session_id, **kwargs):
        mode = (await self.refresh(session_id)).state
        await self.engine.notify(session_id, update_agent_message(text_block(f"in {mode}")))
        return PromptResponse(stop_reason="end_turn")


asyncio.run(run_agent(Agent(preset("seed"), store=FileStore(sys.argv[1]))))
'''


async def test_an_agent_on_sdk_012_helpers_runs_with_modefsm(tmp_path: Path):
    """deepagents-acp's imports (``text_block``, ``update_agent_message`` from ``acp``) work
    next to modefsm: the official client sees the modes, the change and the agent's text."""
    _needs_sdk_012()
    script = tmp_path / "agent.py"
    script.write_text(AGENT_012, encoding="utf-8")
    log = tmp_path / "modes.jsonl"
    client = TestClient()
    async with spawn_v1(client, *host_command(script, log)) as (conn, _process):
        created = await conn.new_session(cwd="/")
        session_id = created.session_id
        await conn.set_session_mode(session_id=session_id, mode_id="architect")
        done = await conn.prompt(session_id=session_id, prompt=[text_block("plan it")])
    assert created.modes is not None
    assert (created.modes.current_mode_id, done.stop_reason) == ("ask", "end_turn")
    assert [
        (u["update"]["sessionUpdate"], u["update"].get("currentModeId"))
        for u in client.updates(session_id)
    ] == [
        ("current_mode_update", "architect"),
        ("config_option_update", None),
        ("agent_message_chunk", None),
    ]
    assert client.updates(session_id)[-1]["update"]["content"] == {
        "type": "text",
        "text": "in architect",
    }
    header, *records = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert (header["event"], header["spec"]) == ("modefsm.spec", "seed")  # the file's header
    assert [(r["origin"], r["to_mode"]) for r in records] == [
        ("new", "ask"),
        ("set_mode", "architect"),
    ]
