"""Ctrl-C held over a block that must not be cut off half way, and taken as the block ends.

Two kinds of block need it. A process start (:mod:`sim.runs.processes`): cut off, it leaves a
process this one does not know of. And a command's imports: a ``KeyboardInterrupt`` raised
inside a C extension's initialisation is not always a ``KeyboardInterrupt`` by the time it
reaches the command (NumPy's turns it into ``ImportError: numpy._core.multiarray failed to
import``, with a traceback), so the entry points ``python -m sim`` and ``specrace`` import
with Ctrl-C held and take it, as one ``KeyboardInterrupt``, once the imports are whole.
Nothing here imports more than the standard library's signal handling.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """SIGINT blocked in this thread for the block, and in the main thread taken only as the
    block ends (its handler then runs: ``KeyboardInterrupt``). A process started in the block
    is born with SIGINT blocked: the mask passes through fork and exec (the fork server's
    children get it from the fork server). Where there are no signal masks (Windows), nothing
    is held."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    taken: list[int] = []
    # Another thread may take a SIGINT meant for the process (the mask is per thread): the
    # handler still runs in the main thread, where it is only noted until the block ends.
    record = threading.current_thread() is threading.main_thread() and callable(handler)
    if record:
        signal.signal(signal.SIGINT, lambda signum, _frame: taken.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one held here runs the note-taker
        if record:
            signal.signal(signal.SIGINT, handler)
            if taken and callable(handler):
                handler(signal.SIGINT, None)


def keep_exit_status() -> None:
    """Make the status the program chose the one it exits with, after a caught Ctrl-C.

    CPython remembers a ``KeyboardInterrupt`` that ended a string ``exec`` or ``eval`` (as
    ``dataclasses`` and ``namedtuple`` build methods, and as some extensions run code while they
    initialise) even when the program caught it afterwards, and under ``python -m`` it then
    exits by SIGINT (status -2 to a parent) instead of with the status given to ``SystemExit``
    (``run_eval_code_obj`` in Python/pythonrun.c sets the flag; ``Py_RunMain`` in Modules/main.c
    reads it). Every string eval clears that memory as it starts: one empty eval, as the program
    ends, keeps its status. A script file or ``-c`` never reads the flag; this is then a no-op.
    """
    eval("None")  # a string eval, for its side effect above; it runs nothing


def retake_swallowed_interrupts() -> None:
    """A Ctrl-C that lands while Python runs a callback it cannot raise from (an import lock's
    weakref callback, a ``__del__``) becomes an "Exception ignored" message, and the command
    runs on as if no Ctrl-C had come. Installed by the entry points, this hook sees that
    ``KeyboardInterrupt`` and asks for it again from a timer thread a few milliseconds later,
    when the main thread has left the callback (asked from the hook itself, it would land in
    the hook and be ignored the same way); landing in another such callback repeats this."""
    import sys

    previous = sys.unraisablehook
    if getattr(previous, "retakes_interrupts", False):
        return  # installed already: a second hook would ask for each Ctrl-C twice

    def hook(unraisable) -> None:  # type: ignore[no-untyped-def]
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            import _thread

            threading.Timer(0.005, _thread.interrupt_main).start()
            return
        previous(unraisable)

    hook.retakes_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook
