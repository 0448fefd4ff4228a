"""Who may use ``serve --http``: the ``Host``, the ``Origin`` and the bearer token.

:class:`Access` is the check :func:`~modefsm.protocol.create_app` makes on every HTTP
request and WebSocket upgrade before anything else runs, in this order:

1. ``Host`` (DNS rebinding: a page of ``attacker.example`` whose name now resolves to
   127.0.0.1 sends ``Host: attacker.example``): one of the loopback names ``localhost``,
   ``127.0.0.1``, ``[::1]`` with any port, or a host the server was told to answer
   (``host`` for any port, ``host:port`` for one); refused ``403``, ``data.rule`` ``"host"``;
2. ``Origin`` (any web page can make the user's browser send requests and open WebSockets
   to 127.0.0.1): none, an ``http``/``https`` origin on a loopback name, or one of the
   allowed origins (exact ``scheme://host[:port]``); refused ``403``, ``data.rule``
   ``"origin"``. A CORS preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from
   an allowed origin is answered ``204`` (methods ``GET, POST, DELETE``, headers
   ``Authorization``, ``Content-Type``, ``Accept`` and ACP's ``Acp-Connection-Id``,
   ``Acp-Session-Id``), and the answers to such an origin carry
   ``Access-Control-Allow-Origin`` and expose ACP's headers;
3. the token, when the server has one: ``Authorization: Bearer TOKEN`` on every request
   and upgrade, or, on a WebSocket upgrade (a browser's ``new WebSocket(url, protocols)``
   can send no header), a ``Sec-WebSocket-Protocol`` entry ``modefsm.token.TOKEN``
   beside ``acp`` (the server selects ``acp``; the token is never sent back). Compared in
   constant time (:func:`hmac.compare_digest`); refused ``401`` with
   ``WWW-Authenticate: Bearer``, ``-32000``, ``data.rule`` ``"token"``. A token in the
   query string is not accepted (URLs end up in logs and histories).

No refusal says more than the rule and what would be accepted: the token, the refused
``Host`` or ``Origin`` are never echoed.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import ipaddress
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from modefsm.errors import AUTH_REQUIRED, INVALID_REQUEST, ModefsmError

__all__ = [
    "ACP_SUBPROTOCOL",
    "LOOPBACK_NAMES",
    "TOKEN_SUBPROTOCOL",
    "Access",
    "Refusal",
    "is_loopback",
    "new_token",
    "normal_host",
    "normal_origin",
    "read_token_file",
    "write_token_file",
]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
"""The ``Host`` names (any port) and ``Origin`` hosts accepted without being allowed."""
TOKEN_SUBPROTOCOL = "modefsm.token."  # noqa: S105 - a prefix, not a secret
"""A ``Sec-WebSocket-Protocol`` entry ``modefsm.token.TOKEN`` carries the token."""
ACP_SUBPROTOCOL = "acp"
"""The subprotocol a WebSocket offering it is answered with."""
TOKEN_BYTES = 32
"""The random bytes of a generated token (256 bits; 43 URL-safe characters)."""
MIN_TOKEN_CHARS = 32
"""The shortest token accepted from a file."""

_TOKEN = re.compile(r"[A-Za-z0-9._~-]+")
_CORS_HEADERS = "Authorization, Content-Type, Accept, Acp-Connection-Id, Acp-Session-Id"
_EXPOSED = "Acp-Connection-Id, Acp-Session-Id"
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def new_token() -> str:
    """A new random token: :data:`TOKEN_BYTES` bytes, URL-safe base64 without padding."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def check_token(token: str) -> str:
    """*token* if it can be a bearer token and a subprotocol entry, else ``ValueError``.

    A token is at least :data:`MIN_TOKEN_CHARS` characters of ``A-Z a-z 0-9 . _ ~ -``
    (what ``secrets.token_urlsafe`` and ``openssl rand -hex`` write).

    >>> check_token("short")
    Traceback (most recent call last):
    ValueError: a token is at least 32 characters of A-Z a-z 0-9 . _ ~ - (this one has 5)
    """
    if len(token) < MIN_TOKEN_CHARS or not _TOKEN.fullmatch(token):
        msg = (
            f"a token is at least {MIN_TOKEN_CHARS} characters of A-Z a-z 0-9 . _ ~ - "
            f"(this one has {len(token)})"
        )
        raise ValueError(msg)
    return token


def read_token_file(path: Path) -> tuple[str, bool]:
    """The token in the file *path*, and whether it was created now.

    A missing file is created (``0600``, whatever the umask) holding a new token
    (:func:`new_token`); it stays after the server ends. It appears whole: the token is
    written to a private file beside it, then linked to *path*, so a process starting at the
    same moment reads either no file or the complete token (the first link wins; the others
    read its token). An existing one must be a regular file of this user (a file another
    user made chose the token, even when this user, root, can read it) that neither group
    nor others may read or write, holding one token (:func:`check_token`) and optionally a
    newline.

    Raises:
        ModefsmError: the file cannot be read or created, is another user's, others may
            read or write it, or it holds no usable token (the message names the file,
            never the token).
    """
    if not os.path.lexists(path):
        token = new_token()
        if _publish(path, token):
            return token, True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ModefsmError(f"{path}: cannot read the token file: {exc.strerror}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ModefsmError(f"{path}: the token file is not a regular file")
        if status.st_uid != os.geteuid():
            msg = (
                f"{path}: the token file belongs to another user (uid {status.st_uid}): "
                "only a file of this user is trusted"
            )
            raise ModefsmError(msg)
        if status.st_mode & 0o077:
            msg = (
                f"{path}: other users may read or write the token file "
                f"(mode {stat.S_IMODE(status.st_mode):04o}): chmod 600 it"
            )
            raise ModefsmError(msg)
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        return check_token(data.decode("ascii").strip()), False
    except (UnicodeDecodeError, ValueError) as exc:
        reason = exc if isinstance(exc, ValueError) else "not ASCII text"
        raise ModefsmError(f"{path}: not a token file: {reason}") from None


def is_loopback(host: str) -> bool:
    """Whether binding *host* listens on loopback only (``localhost``, 127.0.0.0/8, ``::1``).

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, str | None] | None:
    """``(name, port)`` of a ``Host`` value (``[v6]:port`` too), ``None`` if malformed."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
        if not rest:
            return name, None
        if not rest.startswith(":"):
            return None
        port: str | None = rest[1:]
    else:
        name, colon, port = value.partition(":")
        if not colon:
            port = None
    if not name or (port is not None and not (port.isdigit() and port.isascii())):
        return None
    return name, port


def normal_host(text: str) -> str:
    """``HOST`` or ``HOST:PORT`` (``[V6]:PORT`` for IPv6) in lower case, else ``ValueError``.

    >>> normal_host("Agent.Example.com"), normal_host("[::1]:8000")
    ('agent.example.com', '[::1]:8000')
    """
    value = text.strip().lower()
    if value.count(":") > 1 and not value.startswith("["):  # a bare IPv6 address
        value = f"[{value}]"
    parts = _split_host(value)
    if parts is None or "/" in value or any(c.isspace() for c in value):
        msg = f"not HOST or HOST:PORT (e.g. agent.example.com): {text!r}"
        raise ValueError(msg)
    return value


def normal_origin(text: str) -> str:
    """An origin ``scheme://host[:port]`` as browsers send it, else ``ValueError``.

    The scheme is ``http`` or ``https``; no path; lower case, without the default port.
    ``*`` is refused: name each origin.

    >>> normal_origin("HTTPS://App.Example:443")
    'https://app.example'
    """
    value = text.strip().lower()
    scheme, sep, rest = value.partition("://")
    parts = _split_host(rest) if sep else None
    if value == "*" or scheme not in _DEFAULT_PORTS or parts is None or "/" in rest:
        msg = f"not an origin scheme://host[:port] (e.g. https://app.example): {text!r}"
        raise ValueError(msg)
    name, port = parts
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{name}"
    return f"{scheme}://{name}:{port}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused.

    Attributes:
        status: the HTTP status (``401`` or ``403``).
        code: the JSON-RPC error code of the body (``-32000`` or ``-32600``).
        rule: ``"host"``, ``"origin"`` or ``"token"`` (the body's ``data.rule``).
        details: one sentence saying what would be accepted.
        origin: the request's ``Origin`` when it is allowed (a page there may read the
            refusal: it gets the CORS headers).
    """

    status: int
    code: int
    rule: str
    details: str
    origin: bytes | None = None


@dataclass(frozen=True, slots=True)
class _Grant:
    """A request let through: its allowed cross ``Origin`` (if any) and subprotocol."""

    origin: str | None
    subprotocol: str | None


class Access:
    """The checks of the module docstring, for one server.

    Args:
        token: the bearer token every request must carry; ``None``: no authentication.
        hosts: ``Host`` values accepted beyond the loopback names: ``host`` (any port) or
            ``host:port`` (:func:`normal_host`).
        origins: ``Origin`` values accepted beyond loopback ones (:func:`normal_origin`).

    Raises:
        ValueError: a token, host or origin that is not one.
    """

    def __init__(
        self, token: str | None, *, hosts: tuple[str, ...] = (), origins: tuple[str, ...] = ()
    ) -> None:
        """Normalize the lists once; requests are checked against sets."""
        self.token = None if token is None else check_token(token).encode("ascii")
        self.hosts = frozenset(normal_host(h) for h in hosts)
        self.origins = frozenset(normal_origin(o) for o in origins)

    def check(
        self, headers: list[tuple[bytes, bytes]], subprotocols: list[str] | None = None
    ) -> Refusal | _Grant:
        """The verdict on a request with ASGI *headers* (and a WebSocket's *subprotocols*)."""
        host: bytes | None = None
        origin: bytes | None = None
        authorization: bytes | None = None
        for name, value in headers:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"authorization":
                authorization = value
        if host is None or not self._host_ok(host.decode("latin-1").lower()):
            details = (
                "the request's Host is not a loopback name or an allowed host "
                "(modefsm serve --allow-host)"
            )
            return Refusal(403, INVALID_REQUEST, "host", details)
        allowed = None
        if origin is not None:
            allowed = origin.decode("latin-1").lower()
            if not self._origin_ok(allowed):
                details = (
                    "the request's Origin is not a loopback origin or an allowed origin "
                    "(modefsm serve --allow-origin)"
                )
                return Refusal(403, INVALID_REQUEST, "origin", details)
        subprotocol = None
        if subprotocols is not None and ACP_SUBPROTOCOL in subprotocols:
            subprotocol = ACP_SUBPROTOCOL
        if self.token is not None and not self._token_ok(authorization, subprotocols):
            details = (
                "a bearer token is required: Authorization: Bearer TOKEN (a WebSocket may "
                "instead offer the subprotocols acp and modefsm.token.TOKEN)"
            )
            return Refusal(401, AUTH_REQUIRED, "token", details, origin)
        return _Grant(allowed, subprotocol)

    def preflight(self, origin: bytes) -> list[tuple[bytes, bytes]]:
        """The headers of the ``204`` answer to a CORS preflight from an allowed *origin*."""
        return [
            *self.cors(origin),
            (b"access-control-allow-methods", b"GET, POST, DELETE"),
            (b"access-control-allow-headers", _CORS_HEADERS.encode()),
            (b"access-control-max-age", b"600"),
        ]

    @staticmethod
    def cors(origin: bytes) -> list[tuple[bytes, bytes]]:
        """The headers every answer to the allowed cross *origin* carries."""
        return [
            (b"access-control-allow-origin", origin),
            (b"access-control-expose-headers", _EXPOSED.encode()),
            (b"vary", b"Origin"),
        ]

    def _host_ok(self, value: str) -> bool:
        if value in self.hosts:
            return True
        parts = _split_host(value)
        if parts is None:
            return False
        name = parts[0]
        return name in LOOPBACK_NAMES or name in self.hosts

    def _origin_ok(self, value: str) -> bool:
        if value in self.origins:
            return True
        scheme, sep, rest = value.partition("://")
        parts = _split_host(rest) if sep and scheme in _DEFAULT_PORTS else None
        return parts is not None and parts[0] in LOOPBACK_NAMES

    def _token_ok(self, authorization: bytes | None, subprotocols: list[str] | None) -> bool:
        token = self.token
        assert token is not None  # noqa: S101 - checked by the caller
        ok = False
        if authorization is not None:
            scheme, _space, given = authorization.partition(b" ")
            if scheme.lower() == b"bearer":
                ok = hmac.compare_digest(given.strip(), token)
        for entry in subprotocols or ():
            if entry.startswith(TOKEN_SUBPROTOCOL):
                given = entry[len(TOKEN_SUBPROTOCOL) :].encode("utf-8", "replace")
                ok = hmac.compare_digest(given, token) or ok
        return ok


def token_directory() -> Path:
    """Where :func:`write_token_file` puts generated tokens, created ``0700`` if missing.

    ``$XDG_RUNTIME_DIR/modefsm`` when ``XDG_RUNTIME_DIR`` names a directory, else
    ``modefsm-UID`` in the temporary directory (:func:`tempfile.gettempdir`).

    Raises:
        ModefsmError: the directory cannot be made, or is not a directory of this user
            that only this user can open (someone else made it, or its mode lets others
            in).
    """
    import tempfile  # noqa: PLC0415 - only when a token is generated

    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and Path(runtime).is_absolute() and Path(runtime).is_dir():
        folder = Path(runtime) / "modefsm"
    else:
        folder = Path(tempfile.gettempdir()) / f"modefsm-{os.geteuid()}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ModefsmError(f"{folder}: cannot make the token directory: {exc.strerror}") from None
    else:
        os.chmod(folder, 0o700)  # noqa: PTH101 - whatever the umask left
    status = folder.lstat()
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid() or status.st_mode & 0o077:
        msg = (
            f"{folder}: not a directory of this user closed to others "
            f"(mode {stat.S_IMODE(status.st_mode):04o}, owner uid {status.st_uid}): "
            "no token written there (remove it, or give --token-file)"
        )
        raise ModefsmError(msg)
    return folder


def write_token_file(token: str, name: str) -> Path:
    """Write *token* to a new file *name* in :func:`token_directory`, ``0600``; its path.

    A file of that name left by an earlier process is replaced.

    Raises:
        ModefsmError: the directory is unusable (see :func:`token_directory`) or the file
            cannot be written.
    """
    path = token_directory() / name
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            path.unlink()
            fd = os.open(path, flags, 0o600)
        _fill(fd, path, token)
    except OSError as exc:
        raise ModefsmError(f"{path}: cannot write the token file: {exc.strerror}") from None
    return path


def _publish(path: Path, token: str) -> bool:
    """Make *path* hold *token*, whole from its first moment; ``False`` if it already exists.

    Raises:
        ModefsmError: the file cannot be written (a full disk, a directory not writable).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(draft, flags, 0o600)
    except OSError as exc:
        raise ModefsmError(f"{path}: cannot create the token file: {exc.strerror}") from None
    try:
        _fill(fd, draft, token)
    except OSError as exc:
        raise ModefsmError(f"{path}: cannot write the token file: {exc.strerror}") from None
    try:
        os.link(draft, path)
    except FileExistsError:
        return False
    except OSError as exc:
        raise ModefsmError(f"{path}: cannot create the token file: {exc.strerror}") from None
    finally:
        draft.unlink(missing_ok=True)
    return True


def _fill(fd: int, path: Path, token: str) -> None:
    """Write *token* and a newline to the new file *path* open as *fd*, ``0600``; close it.

    A file that cannot be written whole (a full disk) is removed: no empty token file is
    left for the next start to refuse.

    Raises:
        OSError: the write failed (the file is gone).
    """
    data = f"{token}\n".encode("ascii")
    error: OSError | None = None
    try:
        os.fchmod(fd, 0o600)
        if os.write(fd, data) < len(data):
            error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError as exc:
        error = exc
    os.close(fd)
    if error is not None:
        with contextlib.suppress(OSError):
            path.unlink()
        raise error
