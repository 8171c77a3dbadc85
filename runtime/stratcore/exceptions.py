"""Errors raised by the runtime."""

from __future__ import annotations


class MisconfigurationError(ValueError):
    """An argument has a value the strategy cannot work with. The message names the argument
    and what is allowed."""


class MissingDependencyError(ImportError):
    """A backend needs a package that is not installed. The message says how to install it."""


class ProcessFailedError(RuntimeError):
    """A training process failed; the job was stopped on every rank.

    Attributes:
        rank: Global rank of the process that failed first (None if unknown).
        exit_code: Its exit code; negative for a signal (-9 for SIGKILL).
        error: The failing process's traceback, when it could report one.
    """

    def __init__(
        self, message: str, rank: int | None = None, exit_code: int | None = None, error: str = ""
    ):
        super().__init__(message)
        self.rank = rank
        self.exit_code = exit_code
        self.error = error


class CollectiveTimeoutError(ProcessFailedError):
    """A collective operation waited longer than the strategy's ``timeout`` for the other
    processes: one of them hangs, is much slower, or died without its connection closing.

    Raised in the process that waited; the backend's own error is its ``__cause__``.

    Attributes:
        operation: What was waiting ('reduce', 'barrier', 'backward', 'connect', ...).
        timeout: The limit in seconds.
    """

    def __init__(
        self,
        message: str,
        rank: int | None = None,
        operation: str = "",
        timeout: float | None = None,
    ):
        super().__init__(message, rank=rank)
        self.operation = operation
        self.timeout = timeout
