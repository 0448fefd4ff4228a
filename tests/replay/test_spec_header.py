"""A log names its spec (a ``modefsm.spec`` header): replay needs no spec file, and says
clearly when the spec given is another one; writers name a spec once per file."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import orjson
import pytest

from modefsm import LogStore, ModeEngine, ModeSpec, TransitionLog, preset
from modefsm.cli._main import main
from modefsm.log import MAX_SPEC_TEXT, read_log
from modefsm.replay import Replayer, replay
from modefsm.spec import MAX_PROMPT
from modefsm.store import FileStore

REVIEW = """\
name = "review"
initial = "draft"

[[modes]]
id = "draft"
name = "Draft"

[[modes]]
id = "review"
name = "Review"
"""


def _events(path: Path) -> list[str]:
    return [orjson.loads(line)["event"] for line in path.read_bytes().splitlines()]


def _review_log(tmp_path: Path) -> tuple[Path, ModeSpec]:
    """A log written by ``modefsm serve --spec review.toml`` would be: a custom spec."""
    spec_file = tmp_path / "review.toml"
    spec_file.write_text(REVIEW)
    spec = ModeSpec.from_data(tomllib.loads(REVIEW))
    path = tmp_path / "review.jsonl"
    log = TransitionLog.to_file(path)
    engine = ModeEngine(spec, store=LogStore(log))
    engine.new_session("s1")
    engine.change("s1", "review", "set_mode")
    engine.change("s1", "draft", "set_mode")
    log.close()
    return path, spec


def _replay(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    status = main(["replay", *argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


class TestReplay:
    """``modefsm replay LOG`` takes the spec from the header; ``--spec`` is checked against it."""

    def test_a_custom_spec_log_without_spec_is_clean(self, tmp_path, capsys):
        path, spec = _review_log(tmp_path)
        assert _events(path) == [
            "modefsm.spec",
            "modefsm.session_created",
            "modefsm.mode_changed",
            "modefsm.mode_changed",
        ]
        header = orjson.loads(path.read_bytes().splitlines()[0])
        assert (header["spec"], header["spec_hash"], header["definition"]) == (
            "review",
            spec.content_hash,
            spec.definition,
        )
        status, out, err = _replay(capsys, str(path), "--verify", "--summary")
        assert (status, err) == (0, "")
        assert out[:2] == ["SESSIONS (1)", "  s1  draft  (seq 3, spec review, 3 records)"]
        assert out[-1] == "RESULT  clean"

    def test_a_checked_change_is_checked_against_the_headers_spec(self, tmp_path, capsys):
        """Not only named: the header's spec judges the records (an illegal edge found)."""
        path, _ = _review_log(tmp_path)
        lines = path.read_bytes().splitlines()
        data = orjson.loads(lines[2])
        data["to_mode"] = "published"
        lines[2] = orjson.dumps(data)
        path.write_bytes(b"\n".join(lines) + b"\n")
        report = replay([path])
        assert [(v.kind, v.message) for v in report.violations][:1] == [
            ("illegal", "to_mode 'published' is not a mode of spec 'review' (draft, review)")
        ]

    def test_another_spec_given_is_exit_3_with_one_line_naming_both_hashes(self, tmp_path, capsys):
        path, spec = _review_log(tmp_path)
        other = tmp_path / "other.toml"
        other.write_text(REVIEW.replace('name = "Review"', 'name = "In review"'))
        given = ModeSpec.from_data(tomllib.loads(other.read_text()))
        status, out, err = _replay(capsys, str(path), "--spec", str(other), "--summary")
        assert (status, err) == (3, "")
        assert out[2:5] == [
            "VIOLATIONS (1)",
            (
                f"  {path}:1: spec_mismatch: the log was written with spec 'review' "
                f"{spec.content_hash} (its header), not with the spec given ('review' "
                f"{given.content_hash}); its records are not checked: replay without --spec "
                "or --preset to check them against the header's spec"
            ),
            "RESULT  spec mismatch: the log's header names another spec than the one given",
        ]
        status, out, _ = _replay(capsys, str(path), "--spec", str(tmp_path / "review.toml"))
        assert (status, out[-1]) == (0, "RESULT  clean")  # the same spec: checked, clean

    @pytest.mark.parametrize("verify", [False, True], ids=["", "verify"])
    def test_a_header_whose_text_does_not_match_its_hash_is_a_violation(
        self, tmp_path, capsys, verify
    ):
        path, spec = _review_log(tmp_path)
        lines = path.read_bytes().splitlines()
        header = orjson.loads(lines[0])
        header["definition"]["initial"] = "review"
        lines[0] = orjson.dumps(header)
        path.write_bytes(b"\n".join(lines) + b"\n")
        edited = ModeSpec.from_data(header["definition"])
        status, out, _ = _replay(capsys, str(path), "--summary", *(["--verify"] if verify else []))
        tampered = (
            f"  {path}:1: tampered: the record was changed after it was written: its digest "
            "does not match"
        )
        assert status == 1
        assert out[2 : 4 + verify] == [
            f"VIOLATIONS ({1 + verify})",
            *([tampered] if verify else []),
            (
                f"  {path}:1: spec_header: the header names spec 'review' {spec.content_hash}, "
                f"but its definition is spec 'review' {edited.content_hash}: it was changed "
                "after it was written; the records written with it are not checked against it"
            ),
        ]

    def test_a_header_that_is_not_a_spec_is_a_violation(self, tmp_path):
        path, _ = _review_log(tmp_path)
        lines = path.read_bytes().splitlines()
        header = orjson.loads(lines[0])
        header["definition"] = {"name": "review"}
        lines[0] = orjson.dumps(header)
        path.write_bytes(b"\n".join(lines) + b"\n")
        report = replay([path])
        assert [(v.kind, str(v.location)) for v in report.violations] == [
            ("spec_header", f"{path}:1")
        ]
        assert report.violations[0].message.startswith(
            "the header's definition of spec 'review' is not a valid spec: invalid mode spec"
        )
        assert report.exit_status == 1

    def test_a_header_naming_a_prompt_file_reads_no_file(self, tmp_path, monkeypatch):
        """A log is data: replay reads no file its header names (headers hold prompts inline).

        The header is forged whole: its hash is that of the spec with the file's text as
        the prompt, so a replay that read the file would find the header sound.
        """
        path, _ = _review_log(tmp_path)
        (tmp_path / "secret.txt").write_text("the reader's secret", encoding="utf-8")
        monkeypatch.chdir(tmp_path)  # a name relative to the reader's current directory
        lines = path.read_bytes().splitlines()
        header = orjson.loads(lines[0])
        with_text = tomllib.loads(REVIEW)
        with_text["modes"][0]["prompt"] = "the reader's secret"
        header["spec_hash"] = ModeSpec.from_data(with_text).content_hash
        header["definition"]["modes"][0]["prompt_file"] = "secret.txt"
        lines[0] = orjson.dumps(header)
        path.write_bytes(b"\n".join(lines) + b"\n")
        report = replay([path])
        assert [(v.kind, str(v.location)) for v in report.violations] == [
            ("spec_header", f"{path}:1"),
            ("unknown_spec", f"{path}:2"),  # the records' spec: not the forged header's
        ]
        assert report.violations[0].message == (
            "the header's definition of spec 'review' is not a valid spec: invalid mode "
            "spec (1 problem): modes[0].prompt_file: Extra inputs are not permitted"
        )

    def test_a_log_without_a_header_behaves_as_before(self, tmp_path):
        path, spec = _review_log(tmp_path)
        path.write_bytes(path.read_bytes().split(b"\n", 1)[1])
        assert [v.kind for v in replay([path]).violations] == ["unknown_spec"]
        assert replay([path], [spec]).exit_status == 0

    def test_a_spec_too_long_for_a_header_is_named_without_its_definition(self, tmp_path):
        prompt = "p" * MAX_PROMPT
        spec = ModeSpec.from_data(
            {
                "name": "long",
                "initial": "m0",
                "modes": [{"id": f"m{i}", "name": f"M{i}", "prompt": prompt} for i in range(4)],
            }
        )
        assert len(orjson.dumps(spec.definition)) > MAX_SPEC_TEXT
        path = tmp_path / "long.jsonl"
        log = TransitionLog.to_file(path)
        ModeEngine(spec, store=LogStore(log)).new_session("s1")
        log.close()
        header = orjson.loads(path.read_bytes().splitlines()[0])
        assert (header["spec_hash"], header["definition"]) == (spec.content_hash, None)
        assert max(map(len, path.read_bytes().splitlines())) < 1024
        (violation,) = replay([path]).violations
        assert violation.kind == "unknown_spec"
        assert (
            f"(spec 'long' (its header names it without its definition, longer than "
            f"{MAX_SPEC_TEXT} bytes); known:"
        ) in violation.message
        assert replay([path], [spec]).violations == ()


class TestWriters:
    """A file gets one header per spec, whoever writes, across restarts and rotations."""

    def test_a_restart_with_the_same_spec_writes_no_second_header(self, tmp_path):
        path = tmp_path / "modes.jsonl"
        for session_id in ("s1", "s2"):
            log = TransitionLog.to_file(path)
            ModeEngine(preset("seed"), store=LogStore(log)).new_session(session_id)
            log.close()
        assert _events(path) == [
            "modefsm.spec",
            "modefsm.session_created",
            "modefsm.session_created",
        ]

    def test_a_changed_spec_gets_its_own_header_once(self, tmp_path):
        path = tmp_path / "modes.jsonl"
        for number, spec in enumerate([preset("seed"), preset("sandbox"), preset("sandbox")]):
            log = TransitionLog.to_file(path)
            ModeEngine(spec, store=LogStore(log)).new_session(f"s{number}")
            log.close()
        headers = [
            orjson.loads(line)["spec"]
            for line in path.read_bytes().splitlines()
            if b'"modefsm.spec"' in line
        ]
        assert headers == ["seed", "sandbox"]
        assert replay([path], verify=True).exit_status == 0

    def test_one_log_names_each_spec_before_its_first_record_and_again_when_cut(self):
        buffer = io.BytesIO()
        log = TransitionLog.to_stream(buffer)
        seed = ModeEngine(preset("seed"), store=LogStore(log))
        sandbox = ModeEngine(preset("sandbox"), store=LogStore(log))
        seed.new_session("s1")
        seed.new_session("s2")
        sandbox.new_session("b1")
        seed.new_session("s3")
        log.unnamed()  # the file was cut: both are named again before their next record
        sandbox.new_session("b2")
        seed.new_session("s4")
        lines = [orjson.loads(line) for line in buffer.getvalue().splitlines()]
        assert [(line["event"], line.get("spec")) for line in lines] == [
            ("modefsm.spec", "seed"),
            ("modefsm.session_created", "seed"),
            ("modefsm.session_created", "seed"),
            ("modefsm.spec", "sandbox"),
            ("modefsm.session_created", "sandbox"),
            ("modefsm.session_created", "seed"),
            ("modefsm.spec", "sandbox"),
            ("modefsm.session_created", "sandbox"),
            ("modefsm.spec", "seed"),
            ("modefsm.session_created", "seed"),
        ]

    def test_a_header_named_by_another_writer_is_not_written(self):
        buffer = io.BytesIO()
        log = TransitionLog.to_stream(buffer)
        engine = ModeEngine(preset("seed"), store=LogStore(log))
        log.named(preset("seed").content_hash)
        engine.new_session("s1")
        assert [orjson.loads(line)["event"] for line in buffer.getvalue().splitlines()] == [
            "modefsm.session_created"
        ]

    def test_a_rotated_file_starts_with_its_header(self, tmp_path):
        path = tmp_path / "modes.jsonl"
        store = FileStore(path)
        engine = ModeEngine(preset("seed"), store=store)
        engine.new_session("s1")
        path.rename(tmp_path / "modes.jsonl.1")
        engine.change("s1", "code", "set_mode")  # the store follows the new file
        engine.change("s1", "ask", "set_mode")
        store.close()
        old, new = tmp_path / "modes.jsonl.1", path
        assert (_events(old), _events(new)) == (
            ["modefsm.spec", "modefsm.session_created"],
            ["modefsm.spec", "modefsm.mode_changed", "modefsm.mode_changed"],
        )
        report = replay([old, new], verify=True)
        assert (report.violations, report.session("s1").mode) == ((), "ask")
        assert replay([new]).exit_status == 0  # the new file alone names its spec too

    def test_two_processes_appending_write_one_header(self, tmp_path):
        """Two real processes start on one new file at once, each through a FileStore."""
        path = tmp_path / "shared.jsonl"
        script = textwrap.dedent(
            f"""
            import sys
            from modefsm import ModeEngine, preset
            from modefsm.store import FileStore
            store = FileStore({str(path)!r}, lock_timeout=10)
            engine = ModeEngine(preset("seed"), store=store)
            print("ready", flush=True)
            sys.stdin.readline()
            for n in range(20):
                engine.new_session(f"{{sys.argv[1]}}-{{n}}")
            store.close()
            """
        )
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", script, name],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for name in ("a", "b")
        ]
        for worker in workers:  # both have opened the (empty) file before either writes
            assert worker.stdout is not None
            assert worker.stdout.readline() == "ready\n"
        for worker in workers:
            worker.communicate("go\n", timeout=60)
            assert worker.returncode == 0
        events = _events(path)
        assert (events.count("modefsm.spec"), events[0], len(events)) == (1, "modefsm.spec", 41)
        report = replay([path], verify=True)
        assert (report.violations, report.records) == ((), 40)


def test_a_header_is_one_line_that_the_fast_path_leaves_to_the_reader(tmp_path):
    """Every record after the header is taken by the fast path (the header is fed, once),
    with the header's spec when none is given."""
    buffer = io.BytesIO()
    engine = ModeEngine(
        ModeSpec.from_data(tomllib.loads(REVIEW)),
        store=LogStore(TransitionLog.to_stream(buffer)),
    )
    for number in range(50):
        engine.new_session(f"s{number}")
    path = tmp_path / "log.jsonl"
    path.write_bytes(buffer.getvalue())
    replayer = Replayer(None, verify=True)
    taken: list[int] = []

    def take(name: str, line: int, lines: list[bytes], start: int, offset: int) -> int:
        stop = replayer.take(name, line, lines, start, offset)
        taken.extend(range(line, line + stop - start))
        return stop

    items = read_log([path], check_digests=True, take=take, decisions=True, headers=True)
    fed = [type(item).__name__ for item in items if replayer.feed(item) or True]
    report = replayer.report()
    assert (fed, taken) == (["SpecEntry"], list(range(2, 52)))
    assert (report.violations, report.records, report.chain.verified) == ((), 50, 50)
