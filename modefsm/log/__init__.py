"""The transition log: records and their digest chain, the writer, the reader, the journal.

Each name loads its module on first use, so that writing records (the record format and
the writer) loads neither the reader nor the conversation journal.

Exports: the record format (the ``EVENT_*`` names, ``record_digest``,
``canonical_record``, ...; ``_records``, a leaf below the rest), the record models
(``TransitionRecord``, ``DecisionRecord``, ``record_checks``; ``_models``, pydantic), their
fast decoder (``record_decoder``, ``canonical_encoder``; ``_fast``, msgspec),
the writer (``TransitionLog``, ``LogIndex``), the reader (``read_log``, ``LogEntry``,
``LogProblem``, ...), the conversation journal (``ConversationStore``, ``journal_path``,
...) and the private-file helpers every file modefsm creates goes through
(``open_private``, ``create_private``, ``check_private``, ``lock_holders``).

May import: ``errors``, ``spec`` (the rule names a decision record carries), and
``modefsm._lazy``.
"""

from typing import TYPE_CHECKING

from modefsm._lazy import lazy_exports

if TYPE_CHECKING:
    from modefsm.log._conversation import (
        CONVERSATION_MAX_BYTES,
        CONVERSATION_MAX_ENTRIES,
        CONVERSATION_SESSIONS_CACHED,
        EVENT_CONVERSATION,
        JOURNAL_SUFFIX,
        ConversationItem,
        ConversationStore,
        Owner,
        Part,
        journal_path,
        owner_alive,
    )
    from modefsm.log._fast import canonical_encoder, record_decoder
    from modefsm.log._files import check_private, create_private, lock_holders, open_private
    from modefsm.log._models import (
        DecisionRecord,
        FieldCheck,
        SpecRecord,
        TransitionRecord,
        record_checks,
    )
    from modefsm.log._reader import (
        MAX_LINE,
        RECORD_MARK,
        DecisionEntry,
        Location,
        LogEntry,
        LogProblem,
        ProblemKind,
        SpecEntry,
        Take,
        read_log,
    )
    from modefsm.log._records import (
        CHAINED_EVENTS,
        EVENT_CHANGED,
        EVENT_CONFIG,
        EVENT_CREATED,
        EVENT_DECIDED,
        EVENT_DROPPED,
        EVENT_REJECTED,
        EVENT_REPAIRED,
        EVENT_SPEC,
        MAX_SPEC_TEXT,
        RECORD_EVENTS,
        SEQ_MAX,
        Origin,
        Outcome,
        RejectReason,
        canonical_record,
        exact_digest,
        previous_of,
        record_digest,
        title_digest,
        utc_timestamp,
    )
    from modefsm.log._writer import LogIndex, TransitionLog, ignore_file_size_signal, spec_header

__all__ = [
    "CHAINED_EVENTS",
    "CONVERSATION_MAX_BYTES",
    "CONVERSATION_MAX_ENTRIES",
    "CONVERSATION_SESSIONS_CACHED",
    "EVENT_CHANGED",
    "EVENT_CONFIG",
    "EVENT_CONVERSATION",
    "EVENT_CREATED",
    "EVENT_DECIDED",
    "EVENT_DROPPED",
    "EVENT_REJECTED",
    "EVENT_REPAIRED",
    "EVENT_SPEC",
    "JOURNAL_SUFFIX",
    "MAX_LINE",
    "MAX_SPEC_TEXT",
    "RECORD_EVENTS",
    "RECORD_MARK",
    "SEQ_MAX",
    "ConversationItem",
    "ConversationStore",
    "DecisionEntry",
    "DecisionRecord",
    "FieldCheck",
    "Location",
    "LogEntry",
    "LogIndex",
    "LogProblem",
    "Origin",
    "Outcome",
    "Owner",
    "Part",
    "ProblemKind",
    "RejectReason",
    "SpecEntry",
    "SpecRecord",
    "Take",
    "TransitionLog",
    "TransitionRecord",
    "canonical_encoder",
    "canonical_record",
    "check_private",
    "create_private",
    "exact_digest",
    "ignore_file_size_signal",
    "journal_path",
    "lock_holders",
    "open_private",
    "owner_alive",
    "previous_of",
    "read_log",
    "record_checks",
    "record_decoder",
    "record_digest",
    "spec_header",
    "title_digest",
    "utc_timestamp",
]

_MODULES = {
    "modefsm.log._conversation": (
        "JOURNAL_SUFFIX",
        "journal_path",
        "CONVERSATION_MAX_BYTES",
        "CONVERSATION_MAX_ENTRIES",
        "CONVERSATION_SESSIONS_CACHED",
        "EVENT_CONVERSATION",
        "ConversationItem",
        "ConversationStore",
        "Owner",
        "Part",
        "owner_alive",
    ),
    "modefsm.log._fast": ("canonical_encoder", "record_decoder"),
    "modefsm.log._files": ("check_private", "create_private", "lock_holders", "open_private"),
    "modefsm.log._models": (
        "DecisionRecord",
        "FieldCheck",
        "SpecRecord",
        "TransitionRecord",
        "record_checks",
    ),
    "modefsm.log._reader": (
        "DecisionEntry",
        "Location",
        "LogEntry",
        "LogProblem",
        "ProblemKind",
        "RECORD_MARK",
        "SpecEntry",
        "Take",
        "read_log",
    ),
    "modefsm.log._records": (
        "CHAINED_EVENTS",
        "EVENT_CHANGED",
        "EVENT_CONFIG",
        "EVENT_CREATED",
        "EVENT_DECIDED",
        "EVENT_DROPPED",
        "EVENT_REJECTED",
        "EVENT_REPAIRED",
        "EVENT_SPEC",
        "MAX_LINE",
        "MAX_SPEC_TEXT",
        "RECORD_EVENTS",
        "SEQ_MAX",
        "Origin",
        "Outcome",
        "RejectReason",
        "canonical_record",
        "exact_digest",
        "previous_of",
        "record_digest",
        "title_digest",
        "utc_timestamp",
    ),
    "modefsm.log._writer": (
        "LogIndex",
        "TransitionLog",
        "ignore_file_size_signal",
        "spec_header",
    ),
}

__getattr__ = lazy_exports(
    __name__, {name: module for module, names in _MODULES.items() for name in names}
)
"""Import the module's names on first use of one of them."""
