"""Headless Chromium driven over the DevTools protocol, for rendering pictures and screenshots.

One browser serves every page of a test session: :class:`Browser` starts Chromium with
``--remote-debugging-pipe`` (commands on file descriptor 3, answers on 4, each message a
JSON object ended by a NUL byte) and opens one tab. A page is a file loaded with
:meth:`Browser.open`; :meth:`Browser.evaluate` runs a script in it (awaiting a promise);
:meth:`Browser.screenshot` takes a PNG of a rectangle of the page at one CSS pixel per image
pixel.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import time
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

TIMEOUT = 120.0
"""How long one command may take, in seconds."""


def _high(fds: tuple[int, int]) -> tuple[int, int]:
    """The pipe *fds* moved above 4, so that moving them onto 3 and 4 clobbers neither."""
    moved = (
        fcntl.fcntl(fds[0], fcntl.F_DUPFD_CLOEXEC, 10),
        fcntl.fcntl(fds[1], fcntl.F_DUPFD_CLOEXEC, 10),
    )
    os.close(fds[0])
    os.close(fds[1])
    return moved


class BrowserError(Exception):
    """Chromium answered a command with an error, or stopped answering."""


class Browser:
    """A headless Chromium with one tab, closed by :meth:`close` (or ``with``)."""

    def __init__(self, executable: str, profile: Path) -> None:
        """Start *executable* with a fresh profile directory *profile* and open a tab."""
        commands_read, self._commands = _high(os.pipe())
        self._answers, answers_write = _high(os.pipe())
        # Chromium reads commands on fd 3 and writes answers on fd 4.
        self._process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                "--font-render-hinting=none",
                "--allow-file-access-from-files",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=lambda: (os.dup2(commands_read, 3), os.dup2(answers_write, 4)),  # noqa: PLW1509
        )
        os.close(commands_read)
        os.close(answers_write)
        self._buffer = b""
        self._next_id = 0
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def __enter__(self) -> Self:
        """The browser itself."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the browser."""
        self.close()

    def close(self) -> None:
        """Stop Chromium and wait for it."""
        os.close(self._commands)
        os.close(self._answers)
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def call(self, method: str, **params: Any) -> Any:
        """Send one DevTools command to the tab and return its result."""
        return self._call(method, session=self._session, **params)

    def version(self) -> str:
        """Chromium's version, e.g. ``156.0.8078.114``."""
        product: str = self._call("Browser.getVersion")["product"]
        return product.rpartition("/")[2]

    def open(self, page: Path) -> None:
        """Load the file *page* and wait for its ``load`` event."""
        self.call("Page.navigate", url=page.as_uri())
        self._wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """Run *expression* in the page (a promise is awaited) and return its JSON value.

        Raises:
            BrowserError: the script threw.
        """
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            thrown = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(thrown)
        return result["result"].get("value")

    def screenshot(self, width: int, height: int) -> bytes:
        """A PNG of the page's rectangle from (0, 0), *width* by *height* CSS pixels."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        data = self.call(
            "Page.captureScreenshot",
            format="png",
            clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        )["data"]
        return base64.b64decode(data)

    # -- the pipe -------------------------------------------------------------------------

    def _call(self, method: str, session: str | None = None, **params: Any) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    msg = f"{method}: {answer['error']}"
                    raise BrowserError(msg)
                return answer["result"]

    def _wait_for(self, event: str) -> None:
        while self._read().get("method") != event:
            pass

    def _read(self) -> Any:
        deadline = time.monotonic() + TIMEOUT
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                msg = "Chromium did not answer in time"
                raise BrowserError(msg)
            ready, _, _ = select.select(
                [self._answers], [], [], max(0.0, deadline - time.monotonic())
            )
            if not ready:
                continue
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                msg = "Chromium closed its DevTools pipe"
                raise BrowserError(msg)
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(line)
