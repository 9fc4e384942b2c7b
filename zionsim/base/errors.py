"""Errors a user can act on.

Every problem with user input is raised as :class:`InputError`, which carries the file, the field,
what was wrong and what is allowed.  The CLI prints its one-line message and exits non-zero; it
never shows a traceback for bad input.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: ``file: field: problem (allowed: ...)``."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | None = None,
        field: str | None = None,
        allowed: str | None = None,
    ):
        # any value may name a file or field (a YAML key can be a number): shown as text
        file, field = (None if v is None else str(v) for v in (file, field))
        self.file, self.field, self.problem, self.allowed = file, field, str(problem), allowed
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """The message on one line, naming file and field where known."""
        parts = [p for p in (self.file, self.field) if p]
        text = ": ".join(parts + [self.problem])
        if self.allowed:
            text += f" (allowed: {self.allowed})"
        return text.replace("\n", " ")

    def located(self, file: str | None = None, prefix: str | None = None) -> InputError:
        """The same error with a file (if unknown yet) and a field prefix added."""
        field = self.field
        if prefix:
            field = f"{prefix}.{field}" if field else prefix
        return InputError(self.problem, file=self.file or file, field=field, allowed=self.allowed)


class CapacityError(InputError):
    """A placement that does not fit in memory: names the device, bytes needed and available."""


class ResourceError(InputError):
    """A run this machine cannot finish: its estimated memory exceeds the limit (the message
    gives the estimate and the limit; ``docs/reliability.md``)."""


class ModelError(RuntimeError):
    """The model produced what it never should (a NaN or infinite figure) from accepted input:
    a bug in zionsim, not in the input.  The CLI prints one line and exits with status 3
    (``docs/input_bounds.md``)."""

    def __init__(self, problem: str):
        super().__init__(f"{problem} (a bug in zionsim: please report it with the inputs)")
