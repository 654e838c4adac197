"""Stopping a command cleanly: SIGTERM unwinds like Ctrl-C, and a blocking call that Python cannot interrupt gets a
deadline.

Python runs a signal handler only when the main thread is back in the interpreter. A call that blocks inside a
C/C++ library and retries on its own (Ray's cluster client waiting for a GCS that never answers) would otherwise
hold a SIGTERM back for as long as it blocks, and never give up by itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from typing import Iterator

#: exit status of a command whose bounded call ran out of time: the same as a bad argument's
DEADLINE_EXIT = 2


def interrupt_on_sigterm() -> None:
    """Let SIGTERM (``timeout``, ``kill``, a scheduler) unwind like Ctrl-C, so context managers clean up:
    a collection or training stopped that way leaves no half-written temp file behind."""
    def _raise(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _raise)


@contextlib.contextmanager
def bounded_blocking_call(seconds: float, timeout_message: str) -> Iterator[None]:
    """Run the body under a watchdog: if it has not finished after ``seconds``, print ``timeout_message`` as one
    line on stderr and end the process with status 2; a SIGTERM or SIGINT while it runs ends the process at once
    (status 128 + the signal), even while the main thread is blocked in native code.

    Meant for a call made before the command has written anything (joining a cluster): ending the process then
    leaves nothing half-done. Signals reach the watchdog through :func:`signal.set_wakeup_fd`, which the
    interpreter writes from its C-level handler whatever the main thread is doing. Off the main thread (where
    that cannot be set) only the deadline applies.
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    finished = threading.Event()
    previous_fd = None
    if threading.current_thread() is threading.main_thread():
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watchdog = threading.Thread(target=_watch, args=(read_fd, finished, time.monotonic() + seconds, timeout_message),
                                name="r2a-deadline", daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        finished.set()
        if previous_fd is not None:
            signal.set_wakeup_fd(previous_fd)
        watchdog.join()
        os.close(read_fd)
        os.close(write_fd)


def _watch(read_fd: int, finished: threading.Event, deadline: float, timeout_message: str) -> None:
    while not finished.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _exit_now(timeout_message, DEADLINE_EXIT)
        ready, _, _ = select.select([read_fd], [], [], min(remaining, 0.2))
        if ready:
            for signum in os.read(read_fd, 64):
                if signum in (signal.SIGTERM, signal.SIGINT) and not finished.is_set():
                    _exit_now(f"interrupted by {signal.Signals(signum).name}", 128 + signum)


def _exit_now(message: str, status: int) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()
    os._exit(status)
