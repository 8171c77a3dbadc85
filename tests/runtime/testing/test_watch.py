"""stratcore.testing.watch: a job fails on an absence of progress, not on the clock.

Real processes: one that works slowly, one that writes now and then, one that waits (for a
child that sleeps), and a command that ends while a process it started keeps its output open.
"""

from __future__ import annotations

import sys
import time

import pytest
from stratcore.testing import watch

PYTHON = sys.executable
#: Short enough for a test; each job below is far from it or far past it.
STALL = 3.0


def test_a_job_that_uses_the_cpu_is_not_stalled_however_long_it_takes() -> None:
    # Twice the stall period of work, in a process the command starts: no output meanwhile.
    work = f"import time; end = time.monotonic() + {2 * STALL}\nwhile time.monotonic() < end: pass"
    started = time.monotonic()
    completed = watch.run(
        [PYTHON, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {work!r}])"],
        what="a busy job",
        stall=STALL,
    )
    assert completed.returncode == 0
    assert time.monotonic() - started > 2 * STALL


def test_output_is_progress() -> None:
    talk = f"import time\nfor i in range(4): print(i, flush=True); time.sleep({STALL / 2})"
    completed = watch.run([PYTHON, "-c", talk], what="a talking job", stall=STALL)
    assert completed.returncode == 0
    assert completed.stdout.split() == ["0", "1", "2", "3"]


def test_a_waiting_job_fails_after_the_stall_and_says_where_it_waited() -> None:
    code = (
        "import subprocess, sys\n"
        "print('started', flush=True)\n"
        "subprocess.run([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    )
    started = time.monotonic()
    with pytest.raises(watch.Stalled) as failure:
        watch.run([PYTHON, "-c", code], what="a waiting job", stall=STALL)
    assert time.monotonic() - started < 120, "the job was not stopped at its stall"
    message = str(failure.value)
    assert message.startswith(
        f"a waiting job: no progress for {STALL:g} s (no output, and less than 0.1 s of CPU "
        "time in any 10 s) while waiting for a waiting job to end.\nIts processes then:\n"
    ), message
    assert "time.sleep(600)" in message  # the table of processes names both
    assert "subprocess.run" in message
    assert "stdout (end):\nstarted\n" in message
    # The stack of the sleeping process, printed by faulthandler before it was killed (the
    # youngest goes first; here its parent then ends by itself).
    assert "Fatal Python error: Aborted\n\nCurrent thread" in message, message
    assert 'File "<string>", line 1 in <module>' in message


def test_a_process_that_keeps_the_output_open_must_progress_too() -> None:
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('parent done', flush=True)\n"
    )
    with pytest.raises(watch.Stalled) as failure:
        watch.run([PYTHON, "-c", code], what="a job", stall=STALL)
    assert "which hold its output open, to end" in str(failure.value)
    assert "parent done" in str(failure.value)


def test_wait_for_a_condition_and_the_processes_of_a_job() -> None:
    job = watch.Job(
        [PYTHON, "-c", "import time; print('ready', flush=True); time.sleep(600)"],
        what="a sleeper",
        stall=60,
    )
    try:
        job.wait_for(lambda: "ready" in job.stdout, "the sleeper to be ready")
        [(pid, command)] = job.processes()
        assert pid == job.process.pid and "time.sleep(600)" in command
        assert watch.marked_processes(job.marker_env, "1") == [(pid, command)]
    finally:
        job.kill()
    assert job.processes() == []


def test_the_limit_is_named_when_reached() -> None:
    spin = "while True: pass"
    with pytest.raises(watch.Stalled, match=r"^a spinning job: still running after 3 s while "):
        watch.run([PYTHON, "-c", spin], what="a spinning job", stall=60, limit=3)


def test_the_processes_of_a_job_watched_inside_another_are_the_outer_jobs_too() -> None:
    # A command that watches its own command (the benchmark harness under a test): the work
    # below it is the outer job's progress too.
    work = f"import time; end = time.monotonic() + {2 * STALL}\nwhile time.monotonic() < end: pass"
    inner = f"import sys; from stratcore.testing import watch; watch.run([sys.executable, '-c', {work!r}])"
    completed = watch.run([PYTHON, "-c", inner], what="an outer job", stall=STALL)
    assert completed.returncode == 0, completed.stderr
