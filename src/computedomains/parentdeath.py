"""Tie a child process's life to its parent's, as a container's processes die with it."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child is SIGKILLed when we die.

    Call it in the parent, right before the Popen. The kernel ties the signal to the thread
    that forks, so start such children from a thread that lives as long as the process. libc
    is loaded here, in the parent: the child then only calls ``prctl``, and takes no lock a
    thread of the parent may have held at the fork. A parent that dies between the fork and
    the ``prctl`` sends no signal, so the child checks that its parent is still the one that
    forked it, and exits at once otherwise: it would live on under init, holding its ports.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return arm
