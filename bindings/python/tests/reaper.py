"""Children of a test run die with it.

Tests start servers (moto, Azurite, nginx), DCP ranks, peers' venvs and
CLI processes. When the run ends (normally, by SIGTERM, or by a second
Ctrl-C) every child still running is stopped: first SIGTERM, then SIGKILL
after a grace period, and for children started in a session of their own
(`start_new_session=True`) the whole process group. Under pytest-xdist the
controller's children are the workers, which do the same for theirs.

conftest.py imports the hooks below; nothing else uses this module.
"""

import atexit
import os
import signal
import subprocess
import threading
import time

GRACE_SECONDS = 3.0

# Reentrant: a signal handler runs on the main thread, perhaps while that
# thread holds the lock.
_lock = threading.RLock()
_children: list = []  # Popen objects, pruned when they have ended
_original_init = subprocess.Popen.__init__


def _tracking_init(self, *args, **kwargs):
    _original_init(self, *args, **kwargs)
    with _lock:
        _children[:] = [p for p in _children if p.returncode is None and p.poll() is None]
        _children.append(self)


def _signal_child(p, sig) -> None:
    try:
        if os.getpgid(p.pid) == p.pid and p.pid != os.getpgrp():
            os.killpg(p.pid, sig)  # its own session: its descendants too
        else:
            os.kill(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_children() -> None:
    """SIGTERM to every child still running, SIGKILL to those left after
    the grace period; reaps them."""
    with _lock:
        live = [p for p in _children if p.poll() is None]
        _children.clear()
    for p in live:
        _signal_child(p, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for p in live:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_child(p, signal.SIGKILL)
            try:
                p.wait(GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                pass


def _on_sigterm(signum, frame):
    stop_children()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_interrupts = 0
_default_sigint = signal.default_int_handler


def _kill_now() -> None:
    """SIGKILL to every child still running (and its group), at once: what
    a signal handler may do without waiting on anything."""
    for p in list(_children):
        if p.returncode is None:
            _signal_child(p, signal.SIGKILL)


def _on_sigint(signum, frame):
    # The first Ctrl-C is pytest's (KeyboardInterrupt: teardown runs, the
    # children are stopped at unconfigure, the summary prints); a second
    # one kills the children and ends the run at once.
    global _interrupts
    _interrupts += 1
    if _interrupts == 1:
        _default_sigint(signum, frame)
    _kill_now()
    os._exit(130)


def pytest_configure(config):
    if os.name != "posix" or subprocess.Popen.__init__ is _tracking_init:
        return
    subprocess.Popen.__init__ = _tracking_init
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    atexit.register(stop_children)


def pytest_unconfigure(config):
    stop_children()
