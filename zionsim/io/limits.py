"""This machine's limits for the resource guards (``sim/resources.py``, ``docs/reliability.md``),
and the start time of a process (the sweep workers' watchdog, ``studies/pool.py``): the reads
of ``/proc`` live here, outside the model.

The memory limit of a run is, first found: ``--max-memory`` (a size such as ``16GiB``, or
``none`` to switch the guard off), the environment variable ``ZIONSIM_MAX_MEMORY`` (same
syntax), or the memory available now (``MemAvailable`` of ``/proc/meminfo`` on Linux, else free
physical pages from ``os.sysconf``; None, no limit, where neither can be read).
"""

from __future__ import annotations

import os

#: environment variable holding the default memory limit
ENV_MAX_MEMORY = "ZIONSIM_MAX_MEMORY"
#: spellings that switch the memory guard off
NO_LIMIT = ("none", "off", "unlimited")


def available_memory_bytes() -> float | None:
    """Memory the kernel says can be allocated without swapping (bytes), or None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def parse_limit(text: str, field: str) -> float | None:
    """A memory limit as written (``16GiB``, ``2e10``, ``none``) in bytes, None for no limit."""
    from zionsim.base.errors import InputError
    from zionsim.base.units import parse_quantity

    if text.strip().lower() in NO_LIMIT:
        return None
    value = parse_quantity(text.strip(), "bytes", field=field)
    if value <= 0:
        raise InputError(f"must be > 0, got {text!r}", field=field, allowed="a size, or none")
    return value


def memory_limit(option: str | None = None, share: int = 1) -> float | None:
    """The memory limit of one run (bytes; None: no limit): ``option`` (``--max-memory``),
    else ``$ZIONSIM_MAX_MEMORY``, else the available memory divided by ``share`` (the runs
    that will share it, e.g. a sweep's local workers)."""
    if option is not None:
        return parse_limit(option, "--max-memory")
    env = os.environ.get(ENV_MAX_MEMORY)
    if env:
        return parse_limit(env, ENV_MAX_MEMORY)
    avail = available_memory_bytes()
    return None if avail is None else avail / max(1, share)


def process_start(pid: int) -> str | None:
    """A process's start time (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or None
    if there is no such process; where ``/proc`` is absent, ``""`` for a live process."""
    try:
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - read at once
    except FileNotFoundError:
        if not os.path.isdir("/proc"):
            return _alive_without_proc(pid)
        return None
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive_without_proc(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        return ""
    return ""
