"""How a failed rank is reported: which failure is the root cause, and in what words."""

from __future__ import annotations

import signal

#: A failed process: (local rank, exit code or None while running, traceback or "").
Report = tuple[int, int | None, str]

#: Messages of a process that failed only because a peer went away.
PEER_FAILURE_PATTERNS = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "Connection refused",
    "NCCL communicator was aborted",
    "ProcessGroupNCCL is aborted",
)


def is_peer_failure(error: str) -> bool:
    """Whether a rank's error only says that another rank went away (a lost connection), not why."""
    return any(pattern in error for pattern in PEER_FAILURE_PATTERNS)


def root_cause(reports: list[Report]) -> Report:
    """Among failed processes (rank, exit code, traceback), the one that failed first-hand:
    an error of its own beats a death without a report, which beats a lost connection."""

    def rank_of(report: Report) -> tuple[int, int]:
        _, code, error = report
        if error and not is_peer_failure(error):
            return (0, report[0])
        if not error or (code is not None and code < 0):
            return (1, report[0])
        return (2, report[0])

    return min(reports, key=rank_of)


def uneven_launches(entered: int, other: int, ended: str) -> str:
    """How a rank's number of launches differs from rank 0's (``ended``: who ended first)."""
    if ended == "rank 0":
        what = f"entered launch number {entered}, but rank 0 ended the script after {other}"
    else:
        what = (
            f"ended its script after {entered} launch(es), while rank 0 is in launch number {other}"
        )
    return f"{what}; every process must call launch() equally often"


def failure_message(rank: int, local_rank: int, code: int | None, error: str) -> str:
    """What a launcher reports of a rank that failed: its ranks, how it ended, and its error."""
    if code == 0:  # ended normally, but too early: the error says how
        return f"rank {rank} (local rank {local_rank}) {error}"
    text = f"rank {rank} (local rank {local_rank}) {_describe_exit(code, error)}"
    return f"{text}:\n{error.rstrip()}" if error else text


def _describe_exit(code: int | None, error: str) -> str:
    # A process that reported an error may still die by a signal while exiting (gloo can
    # abort in its destructors); the error is what matters.
    if error:
        return "raised an exception"
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by signal {name}"
    return f"exited with code {code}"
