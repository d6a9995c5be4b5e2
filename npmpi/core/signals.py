"""The stop signals (SIGINT, SIGTERM): the first stops after the current trial; on rank 0 a trial
still running soon after is abandoned (the file marked interrupted, the job aborted), from the main
thread's handlers or, inside the C kernel's timed loop, from a thread of its own; a second stops at
once."""

from __future__ import annotations

import signal

ABANDON_TRIAL_AFTER_S = 0.2  # mpirun kills ranks soon after forwarding a signal


def install_signal_handlers(stop, writer_rank: bool) -> None:
    """First SIGINT/SIGTERM: stop after the current trial. On rank 0, a trial still running
    soon after is abandoned (the file is marked, the job aborted); a second signal stops at once."""
    from npmpi.core.errors import Interrupted

    def handler(signum, frame):
        name = signal.Signals(signum).name
        if stop:  # a second signal: stop now
            raise Interrupted(signum, name)
        stop.set(signum, name)
        if writer_rank:
            # say so in the file at once: mpirun may kill every rank before the trial ends
            if stop.mark_file is not None:
                stop.mark_file(f"{name} received; the run was stopping")
            signal.setitimer(signal.ITIMER_REAL, ABANDON_TRIAL_AFTER_S)

    def abandon(signum, frame):
        if stop and (stop.transmitter is None or stop.timing):
            raise Interrupted(
                int(stop.signum or signum), f"{stop.name} (the trial in progress was abandoned)"
            )

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    if writer_rank:
        signal.signal(signal.SIGALRM, abandon)
        watch_signals_in_a_thread(stop)


_WAKEUP: list = []
HANDLER_GRACE_S = 0.02  # how long the signal thread leaves the main thread to run its handler


def watch_signals_in_a_thread(stop) -> None:
    """Rank 0: a stop signal seen by a thread too. The C kernel runs a whole trial without returning
    to Python (its loops retry on EINTR), so the handlers above, which run in the main thread only,
    wait for the trial's end, and mpirun kills the rank first (SIGKILL 0.25 s after its SIGTERM):
    the file was left `running`. Python's own C handler writes each signal's number to a wakeup
    socket at once, in whatever thread; this thread reads it and, when the main thread has not run
    its handler within HANDLER_GRACE_S and is inside a timed loop, marks the file and abandons the
    trial at ABANDON_TRIAL_AFTER_S as the main thread's handlers would (`stop.abandon`, under the
    stall watchdog's lock: never while the main thread writes the file)."""
    import socket
    import threading

    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main thread (an in-process test): the handlers alone
        reader.close()
        writer.close()
        return
    _WAKEUP[:] = [reader, writer]  # kept open for the process's life

    def watch() -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    _signal_in_timed_loop(stop, signum)

    threading.Thread(target=watch, name="npmpi-signal-watch", daemon=True).start()


def _signal_in_timed_loop(stop, signum: int) -> None:
    import time

    time.sleep(HANDLER_GRACE_S)
    if stop or not stop.timing or stop.abandon is None:
        return  # the main thread ran its handler (or will: it is not inside a timed loop)
    name = signal.Signals(signum).name
    stop.abandon(signum, name, False)
    time.sleep(ABANDON_TRIAL_AFTER_S - HANDLER_GRACE_S)
    if not stop and stop.timing:
        stop.abandon(signum, name, True)
