"""modefsm's errors become the JSON-RPC errors ACP clients expect, and nothing else does."""

from __future__ import annotations

import pytest
from acp import RequestError

from modefsm import (
    AskLimitError,
    ChangeRefused,
    HookError,
    LogError,
    UnknownModeError,
    UnknownSessionError,
)
from modefsm.protocol.errors import acp_errors

pytestmark = pytest.mark.sdk_compat


class TestAcpErrors:
    """Each modefsm error maps to one JSON-RPC code; the original is not chained."""

    @pytest.mark.parametrize(
        ("error", "code"),
        [
            pytest.param(UnknownSessionError("sess_x"), -32002, id="unknown-session"),
            pytest.param(UnknownModeError("x", ("ask", "code")), -32602, id="invalid-params"),
            pytest.param(HookError("refuse", ValueError("no")), -32603, id="hook-failed"),
            pytest.param(
                HookError("refuse", RequestError(-32001, "busy")), -32001, id="hook-request-error"
            ),
            pytest.param(LogError("cannot write", "log.jsonl"), -32603, id="log-failed"),
            pytest.param(ChangeRefused("no"), -32602, id="veto"),
            pytest.param(ChangeRefused("no", code=-32001), -32001, id="veto-with-code"),
        ],
    )
    def test_modefsm_error_becomes_request_error(self, error, code):
        with pytest.raises(RequestError) as info, acp_errors():
            raise error
        assert info.value.code == code
        assert info.value.__suppress_context__
        assert info.value.__cause__ is None

    def test_unknown_session_names_the_uri(self):
        with pytest.raises(RequestError) as info, acp_errors():
            raise UnknownSessionError("sess_x")
        assert info.value.data == {"uri": "sess_x"}

    def test_unknown_session_over_v2_names_the_session_id(self):
        with pytest.raises(RequestError) as info, acp_errors(2):
            raise UnknownSessionError("sess_x")
        assert (info.value.code, info.value.data) == (-32002, {"sessionId": "sess_x"})

    def test_a_veto_keeps_the_hosts_message_and_data(self):
        with pytest.raises(RequestError) as info, acp_errors():
            raise ChangeRefused("ask your admin", code=-32001, data={"policy": "no-code"})
        assert info.value.to_error_obj() == {
            "code": -32001,
            "message": "ask your admin",
            "data": {"policy": "no-code"},
        }

    def test_too_many_open_asks_names_the_limit(self):
        with pytest.raises(RequestError) as info, acp_errors():
            raise AskLimitError("sess_x", 64)
        message = (
            "session 'sess_x' already has 64 open permission requests for tool calls; settle "
            "or cancel one first (the tool call was not decided)"
        )
        assert info.value.to_error_obj() == {
            "code": -32600,
            "message": message,
            "data": {"message": message, "limit": "open_asks", "max": 64},
        }

    def test_other_errors_pass_through(self):
        with pytest.raises(KeyError), acp_errors():
            raise KeyError("x")

    def test_no_error_no_effect(self):
        with acp_errors():
            value = 1
        assert value == 1
