"""Processes seen through /proc, for the kill -9 tests (Linux): who is below whom, who is
still running."""

from __future__ import annotations

import os
import time
from pathlib import Path

#: seconds a process may take to notice its parent is gone (watchdog polls every 0.2 s)
GRACE_S = 5.0


def process_table() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, state) of every process, from /proc."""
    table = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(d)] = (int(fields[1]), fields[0])
    return table


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    table, found, todo = process_table(), set(), [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _) in table.items():
            if ppid == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def survivors(pids: set[int]) -> set[int]:
    """The ``pids`` still running (zombies count as gone)."""
    table = process_table()
    return {p for p in pids if p in table and table[p][1] != "Z"}


def wait_for(condition, timeout_s: float = 30.0, step_s: float = 0.02) -> bool:
    """Poll ``condition()`` until true or ``timeout_s``; return its last value."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(step_s)
    return bool(condition())
