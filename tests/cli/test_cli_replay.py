"""``modefsm replay``: formats, exit statuses, bad input as one line, rebuild, progress."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from modefsm import LogStore, ModeEngine, TransitionLog, preset
from modefsm.cli import _main as cli
from modefsm.cli._main import main
from modefsm.store import RestoreIndex, RestorePoint
from tests.conftest import settle_now

GOLDEN = Path(__file__).resolve().parents[1] / "replay" / "golden"


@pytest.fixture
def log_path(tmp_path) -> Path:
    path = tmp_path / "modes.jsonl"
    log = TransitionLog.to_file(path)
    engine = ModeEngine(preset("seed"), store=LogStore(log))
    engine.new_session("s1")
    engine.change("s1", "code", "set_mode")
    engine.new_session("s2")
    log.close()
    return Path(path)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["replay", *argv])
    out, err = capsys.readouterr()
    return status, out, err


class TestFormats:
    """A table for people, one JSON document for tools."""

    def test_json_is_one_document_with_the_timeline_and_summary(self, capsys, log_path):
        status, out, _ = _run(capsys, str(log_path), "--format", "json", "--verify")
        document = json.loads(out)
        assert (0, [1, 2, 1], ["s1", "s2"], "clean", 3) == (
            status,
            [item["seq"] for item in document["timeline"]],
            [s["session_id"] for s in document["sessions"]],
            document["result"],
            document["chain"]["verified"],
        )
        assert f"{log_path}:3" == document["timeline"][1]["location"]  # line 1: the header

    def test_summary_leaves_out_the_timeline_only(self, capsys, log_path):
        _, full, _ = _run(capsys, str(log_path), "--verify")
        status, out, _ = _run(capsys, str(log_path), "--verify", "--summary")
        assert (status, out) == (0, full[full.index("SESSIONS") :])
        assert full.splitlines()[0].startswith("TIME")
        status, out, _ = _run(capsys, str(log_path), "--format", "json", "--summary")
        document = json.loads(out)
        assert (0, [], ["s1", "s2"]) == (
            status,
            document["timeline"],
            [s["session_id"] for s in document["sessions"]],
        )

    def test_json_lists_violations_with_their_place(self, capsys):
        status, out, _ = _run(capsys, str(GOLDEN / "gap.jsonl"), "--format", "json")
        document = json.loads(out)
        assert (1, "gap", f"{GOLDEN}/gap.jsonl:10", "sess_a", 4) == (
            status,
            document["violations"][1]["kind"],
            document["violations"][1]["location"],
            document["violations"][1]["session_id"],
            document["violations"][1]["seq"],
        )

    def test_session_filter(self, capsys, log_path):
        _, out, _ = _run(capsys, str(log_path), "--session", "s2")
        assert ["s2"] == [line.split()[1] for line in out.splitlines()[1:2]]
        assert "SESSIONS (1)\n  s2  ask  (seq 1, spec seed, 1 record)\n" in out

    def test_stdin(self, capsys, log_path, monkeypatch):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(log_path.read_bytes())))
        status, out, _ = _run(capsys, "-")
        assert (0, "RESULT  clean") == (status, out.splitlines()[-1])

    def test_spec_file(self, capsys, log_path, tmp_path):
        spec = tmp_path / "seed.json"
        spec.write_text(preset("seed").model_dump_json(by_alias=True))
        status, out, _ = _run(capsys, str(log_path), "--spec", str(spec))
        assert (0, "RESULT  clean") == (status, out.splitlines()[-1])


LONG_ID = "sess_0f8e1c2a9b7d4e3f8a6b5c4d3e2f1a0b"  # 37 characters, as serve's ids are


@pytest.fixture
def long_ids_log(tmp_path) -> Path:
    from tests.replay.golden_logs import fixed_clock

    path = tmp_path / "long.jsonl"
    log = TransitionLog.to_file(path)
    with fixed_clock():
        engine = ModeEngine(preset("seed"), store=LogStore(log))
        engine.new_session(LONG_ID)
        engine.new_session("s2")
        engine.change(LONG_ID, "architect", "set_mode")
        settle_now(engine, LONG_ID, "code", tool_call_id="call_1")
    log.close()
    return Path(path)


class TestTable:
    """The timeline's and the summary's columns fit their longest value."""

    def test_columns_fit_37_character_session_ids(self, capsys, long_ids_log):
        status, out, _ = _run(capsys, str(long_ids_log))
        assert 0 == status
        assert (
            "TIME                         SESSION                                SEQ  CHANGE"
            "             ORIGIN       TOOL CALL / OPTION\n"
            f"2026-01-01T00:00:01.000000Z  {LONG_ID}    1  -> ask             new\n"
            "2026-01-01T00:00:02.000000Z  s2                                       1  -> ask"
            "             new\n"
            f"2026-01-01T00:00:03.000000Z  {LONG_ID}    2  ask -> architect   set_mode\n"
            f"2026-01-01T00:00:04.000000Z  {LONG_ID}    3  architect -> code  switch_mode"
            "  call_1 / code\n"
            "\n"
            "SESSIONS (2)\n"
            f"  {LONG_ID}  code  (seq 3, spec seed, 3 records)\n"
            "  s2                                     ask   (seq 1, spec seed, 1 record)\n"
            "RESULT  clean\n"
        ) == out

    def test_rows_past_the_held_ones_keep_the_widths(self, capsys, long_ids_log, monkeypatch):
        from modefsm.replay import _report

        monkeypatch.setattr(_report, "HELD_ROWS", 2)
        _, out, _ = _run(capsys, str(long_ids_log))
        assert [
            (
                "TIME                         SESSION                                SEQ  CHANGE  "
                "ORIGIN  TOOL CALL / OPTION"
            ),
            f"2026-01-01T00:00:01.000000Z  {LONG_ID}    1  -> ask  new",
            "2026-01-01T00:00:02.000000Z  s2                                       1  -> ask  new",
            f"2026-01-01T00:00:03.000000Z  {LONG_ID}    2  ask -> architect  set_mode",
        ] == out.splitlines()[:4]


class TestExitStatus:
    """0 clean, 1 violations, 2 unusable input, 3 only records whose spec was not given."""

    def test_unknown_spec_alone_is_3(self, capsys):
        status, out, err = _run(capsys, str(GOLDEN / "unknown_spec.jsonl"))
        assert (3, "RESULT  spec mismatch: records written with a spec not given", "") == (
            status,
            out.splitlines()[-1],
            err,
        )

    def test_unknown_spec_with_another_violation_is_1(self, capsys, tmp_path):
        path = tmp_path / "gap.jsonl"
        lines = (GOLDEN / "unknown_spec.jsonl").read_bytes().splitlines(keepends=True)
        path.write_bytes(lines[0] + lines[2])  # seq 2 deleted: a gap
        status, out, _ = _run(capsys, str(path))
        assert (1, "RESULT  3 violations") == (status, out.splitlines()[-1])
        assert ["gap", "from_mode", "unknown_spec"] == [
            line.split(": ")[2] for line in out.splitlines() if line.startswith(f"  {path}:")
        ]

    def test_every_commands_statuses_are_in_the_top_help(self, capsys):
        with pytest.raises(SystemExit):
            main(["--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert text.endswith(
            "Exit status: 0 success; 2 a usage or input error (one line on stderr); demo: 1 a "
            "step did not behave as ACP says; serve: 1 its output closed; replay: 1 "
            "violations, 3 spec mismatch (see modefsm replay --help)."
        )

    def test_statuses_are_in_the_help(self, capsys):
        with pytest.raises(SystemExit):
            main(["replay", "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert (
            "Exit status: 0 clean, 1 violations found, 2 usage error or unusable input (a "
            "file that cannot be read, is not text, or has more lines that are not JSON "
            "objects than modefsm records), 3 spec mismatch (the only violations are records "
            "written with a spec not given, or with an earlier version of one given, or a "
            "log's header naming another spec than the one given). Without --spec or --preset, "
            "each log's header names the spec its records are checked against."
        ) in text


class TestBadInput:
    """Unusable input: exit 2, one line on stderr per problem, never a traceback."""

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            (b"", "modefsm replay: no_records: the input holds no modefsm record\n"),
            (
                bytes(range(256)),
                (
                    "modefsm replay: {path}:1: not_text: binary data, not a JSON-lines log: "
                    "file skipped\n"
                ),
            ),
            (
                b'{"event":"x"}\n{"event":"y"}\n',
                "modefsm replay: no_records: the input holds no modefsm record\n",
            ),
            (
                b'{"event":"x"}\n[1,2]\n',
                (
                    "modefsm replay: {path}: not_a_log: 1 of its 2 lines are not JSON objects, "
                    "more than its 0 modefsm records: not a transition log\n"
                ),
            ),
            (None, "modefsm replay: {path}: unreadable: cannot read: No such file or directory\n"),
        ],
        ids=["empty", "binary", "json-but-no-records", "json-and-text", "missing"],
    )
    def test_unusable_input(self, capsys, tmp_path, content, message):
        path = tmp_path / "input.log"
        if content is not None:
            path.write_bytes(content)
        status, _, err = _run(capsys, str(path))
        assert (2, message.format(path=path)) == (status, err)

    def test_the_readme_is_not_a_log(self, capsys):
        readme = Path(__file__).resolve().parents[2] / "README.md"
        lines = readme.read_bytes().splitlines()
        content = [line for line in lines if line.strip()]
        text = [line for line in content if not line.lstrip().startswith(b"{")]
        records = [line for line in content if b'"event":"modefsm.mode_changed"' in line]
        noun = "record" if len(records) == 1 else "records"
        status, out, err = _run(capsys, str(readme))
        assert (2, "RESULT  unusable input") == (status, out.splitlines()[-1])
        assert (
            f"modefsm replay: {readme}: not_a_log: {len(text)} of its {len(content)} lines are "
            f"not JSON objects, more than its {len(records)} modefsm {noun}: not a transition "
            "log\n"
        ) == err

    def test_a_log_with_a_few_host_text_lines_is_clean(self, capsys, log_path, tmp_path):
        path = tmp_path / "host.log"
        path.write_bytes(b"INFO host started\n" + log_path.read_bytes() + b"INFO host stopped\n")
        status, out, err = _run(capsys, str(path))
        assert (0, "RESULT  clean", "") == (status, out.splitlines()[-1], err)

    def test_one_file_that_is_not_a_log_among_logs_is_unusable_input(
        self, capsys, log_path, tmp_path
    ):
        notes = tmp_path / "notes.txt"
        notes.write_text("a note\n")
        status, out, err = _run(capsys, str(log_path), str(notes))
        assert (2, "RESULT  unusable input") == (status, out.splitlines()[-1])
        assert (
            f"modefsm replay: {notes}: not_a_log: 1 of its 1 lines are not JSON objects, more "
            "than its 0 modefsm records: not a transition log\n"
        ) == err

    def test_wrong_shape_record_is_a_violation_with_its_place(self, capsys, tmp_path, log_path):
        path = tmp_path / "bad.jsonl"
        path.write_bytes(log_path.read_bytes().replace(b'"seq":2', b'"seq":[2]'))
        status, out, err = _run(capsys, str(path))
        assert (1, "") == (status, err)
        assert (
            f"  {path}:3: session 's1': bad_record: a modefsm.mode_changed record that does "
            "not fit the record model: seq: Input should be a valid integer (got [2])\n"
        ) in out

    def test_bad_spec_file_is_one_line(self, capsys, log_path, tmp_path):
        spec = tmp_path / "bad.toml"
        spec.write_text("name = 'x'\ninitial = 'nope'\n[[modes]]\nid = 'a'\nname = 'A'\n")
        status, out, err = _run(capsys, str(log_path), "--spec", str(spec))
        assert (2, "", 1) == (status, out, len(err.splitlines()))
        assert err.startswith(f"modefsm replay: {spec}: invalid mode spec (1 problem): initial")

    def test_an_unknown_flag_shows_the_commands_usage(self, capsys, log_path):
        with pytest.raises(SystemExit) as stop:
            main(["replay", str(log_path), "--bogus"])
        _, err = capsys.readouterr()
        assert (
            2,
            "usage: modefsm replay ",
            "modefsm replay: error: unrecognized arguments: --bogus",
        ) == (
            stop.value.code,
            err[: len("usage: modefsm replay ")],
            err.splitlines()[-1],
        )

    def test_version(self, capsys):
        with pytest.raises(SystemExit) as stop:
            main(["--version"])
        out, _ = capsys.readouterr()
        assert (0, "modefsm 0.1.0\n") == (stop.value.code, out)

    def test_unknown_preset_is_one_line(self, capsys, log_path):
        status, _, err = _run(capsys, str(log_path), "--preset", "nope")
        assert (2, 1) == (status, len(err.splitlines()))
        assert "unknown preset 'nope'" in err


class TestRebuildIndex:
    """--rebuild-index INDEX writes the restore index from the logs."""

    def test_rebuild(self, capsys, log_path, tmp_path):
        index_path = tmp_path / "modes.index"
        status, out, _ = _run(capsys, str(log_path), "--rebuild-index", str(index_path))
        index = RestoreIndex(index_path)
        try:
            assert (
                0,
                f"rebuilt {index_path}: 2 sessions from 1 log(s)\n",
                RestorePoint("s1", "code", 2, previous="ask"),
            ) == (
                status,
                out,
                index.restore_point("s1"),
            )
        finally:
            index.close()

    def test_rebuild_from_stdin_is_refused(self, capsys, tmp_path):
        status, _, err = _run(capsys, "-", "--rebuild-index", str(tmp_path / "i"))
        assert (2, "modefsm replay: --rebuild-index reads files, not standard input\n") == (
            status,
            err,
        )

    def test_rebuild_into_a_missing_folder_names_the_index(self, capsys, log_path, tmp_path):
        index_path = tmp_path / "missing" / "modes.index"
        status, _, err = _run(capsys, str(log_path), "--rebuild-index", str(index_path))
        expected = f"modefsm replay: {index_path}: cannot open the restore index: "
        assert (2, expected) == (status, err[: len(expected)])
        assert len(err.splitlines()) == 1

    def test_rebuild_from_a_missing_log_is_one_line(self, capsys, tmp_path):
        status, _, err = _run(
            capsys, str(tmp_path / "nope"), "--rebuild-index", str(tmp_path / "i")
        )
        assert (
            2,
            (
                f"modefsm replay: {tmp_path}/nope: unreadable: cannot read: "
                "No such file or directory\n"
            ),
        ) == (status, err)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class TestProgress:
    """A progress bar on stderr, only for big inputs and only on a terminal."""

    def test_small_input_has_no_bar(self, log_path, monkeypatch):
        monkeypatch.setattr(sys, "stderr", _Terminal())
        assert cli._progress_bar([str(log_path)]) is None

    def test_big_input_off_a_terminal_has_no_bar(self, tmp_path):
        big = tmp_path / "big.log"
        big.write_bytes(b"x\n" * (cli._PROGRESS_MIN // 2))
        assert cli._progress_bar([str(big)]) is None

    def test_big_input_on_a_terminal_shows_percent(self, tmp_path, monkeypatch):
        big = tmp_path / "big.log"
        big.write_bytes(b"x\n" * (cli._PROGRESS_MIN // 2))
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        show = cli._progress_bar([str(big), "-", str(tmp_path / "missing")])
        assert show is not None
        show(cli._PROGRESS_MIN // 2)
        assert "\rmodefsm replay:  50% of 4.2 MB" == terminal.getvalue()

    def test_bar_is_cleared_before_the_report(self, tmp_path, monkeypatch):
        big = tmp_path / "big.log"
        big.write_bytes(b'{"event":"host"}\n' * 300_000)
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert 2 == main(["replay", str(big)])
        assert terminal.getvalue().endswith(
            "\r\033[Kmodefsm replay: no_records: the input holds no modefsm record\n"
        )
