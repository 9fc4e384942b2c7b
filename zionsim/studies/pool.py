"""Where a sweep's points run: a local process pool whose workers die with their parent, or a
Dask distributed cluster reached under an explicit trust model (``docs/sweeps.md``).

Local pool (``forkserver`` start method: the parent may hold threads):

1. Every worker starts a watchdog thread that polls, every :data:`POLL_S` seconds, whether the
   sweep's parent process is still the same process (its pid and its start time in
   ``/proc/<pid>/stat``, so a recycled pid does not fool it) and ends the worker with
   ``os._exit`` when it is not.  On Linux the worker also asks the kernel (``prctl
   PR_SET_PDEATHSIG``) for SIGKILL when its own parent, the fork server, dies.  Once the workers
   are gone, the fork server and the resource tracker see their pipes close and exit too, so
   ``kill -9`` of a sweep leaves no process behind.
2. When the parent leaves the pool on an error or a signal (Ctrl-C, SIGTERM), queued points are
   cancelled and running workers terminated; on success the pool is shut down normally.

Dask: tasks and results travel pickled, so whoever runs the scheduler or a worker can run code
in the parent and the parent can run code on them: they must be trusted.  A plain ``tcp://``
address is refused unless its host is the loopback or ``allow_insecure`` is given; ``tls://``
uses the TLS files given here, else Dask's own security configuration
(``distributed.comm.tls.*``).
"""

from __future__ import annotations

import contextlib
import os
import threading

from zionsim.io.limits import process_start

#: seconds between two looks of a worker's watchdog at its parent
POLL_S = 0.2
#: Linux prctl option: signal sent to this process when its parent dies
PR_SET_PDEATHSIG = 1


def _ask_kernel_for_death_signal() -> None:
    """Linux only: SIGKILL this process when its parent dies (no-op elsewhere)."""
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def watch_parent(pid: int, start: str | None) -> None:
    """Pool initializer (assumption 1): exit this worker when process ``pid`` (started at
    ``start``) is gone."""
    _ask_kernel_for_death_signal()

    def loop() -> None:
        while True:
            if process_start(pid) != start:
                os._exit(1)
            threading.Event().wait(POLL_S)

    threading.Thread(target=loop, name="zionsim-parent-watchdog", daemon=True).start()


@contextlib.contextmanager
def local_pool(workers: int):
    """A ``ProcessPoolExecutor`` of ``workers`` whose workers watch this process (assumptions
    1–2)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    me = os.getpid()
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=watch_parent,
        initargs=(me, process_start(me)),
    )
    try:
        yield pool
    except BaseException:
        _terminate(pool)
        raise
    pool.shutdown(wait=True)


def _terminate(pool) -> None:
    """Cancel queued points, kill running workers, and reap them."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):
            p.kill()
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(timeout=5)


#: hosts a plain tcp:// scheduler may have without ``allow_insecure``
LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")
#: Dask transports without encryption
INSECURE = ("tcp", "ws", "ucx")
#: the transports Dask knows
SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")


def check_scheduler(address: str, secure: bool, allow_insecure: bool) -> None:
    """Refuse (:class:`InputError`) a plain TCP scheduler on another host unless
    ``allow_insecure``; refuse TLS files with a non-TLS address."""
    from zionsim.base.errors import InputError

    scheme, _, rest = address.partition("://") if "://" in address else ("tcp", "", address)
    host = rest.rsplit(":", 1)[0] if rest.count(":") == 1 or rest.startswith("[") else rest
    if scheme not in SCHEMES or not host:
        raise InputError(
            f"{address!r} is not a Dask scheduler address",
            field="--scheduler",
            allowed="tls://HOST:PORT, or tcp://127.0.0.1:PORT (" + ", ".join(SCHEMES) + ")",
        )
    if scheme in ("tls", "wss"):
        return
    if secure:
        raise InputError(
            f"TLS files were given but the address is {scheme}://",
            field="--scheduler",
            allowed="tls://HOST:PORT with --tls-*",
        )
    local = host in LOOPBACK or host.startswith("127.")
    if scheme in INSECURE and not local and not allow_insecure:
        raise InputError(
            f"{address!r} is plain TCP to another host: anyone on the network could read the "
            "pickled tasks and results or inject their own (docs/sweeps.md, Dask)",
            field="--scheduler",
            allowed="tls://HOST:PORT with --tls-ca-file/--tls-cert/--tls-key or Dask's TLS "
            "configuration, a loopback address, or --allow-insecure on a trusted network",
        )


def dask_security(ca_file: str | None, cert: str | None, key: str | None):
    """A ``distributed.security.Security`` from TLS files (all three, or none: then None, and
    Dask uses its own configuration)."""
    from zionsim.base.errors import InputError

    given = [x for x in (ca_file, cert, key) if x]
    if not given:
        return None
    if len(given) != 3:
        raise InputError(
            "give all of --tls-ca-file, --tls-cert and --tls-key, or none",
            field="--tls-*",
            allowed="three PEM files",
        )
    for name, path in (("--tls-ca-file", ca_file), ("--tls-cert", cert), ("--tls-key", key)):
        if not os.path.isfile(path):
            raise InputError("no such file", file=path, field=name)
    from distributed.security import Security

    return Security(
        tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True
    )
