"""The ranks of a job its strategy launches meet on a store that no other process can take.

A launcher that picked a free port and handed out its number left it free until rank 0 bound
it: on a busy machine another process could take it meanwhile, and the job then failed
(EADDRINUSE) or waited for ever. Here the port is taken on purpose, in that window.
"""

from __future__ import annotations

import re

import pytest
from stratcore.testing import watch

from .support import python, script_env

STRATEGIES = ["ddp", "ddp_spawn"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_picked_port_taken_meanwhile_cannot_break_the_launch(strategy: str) -> None:
    completed = watch.run(
        python("rendezvous.py", strategy, "picked"), what=f"{strategy} job", env=script_env()
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = re.search(r"taken port (\d+)\nsum 1, met on (\d+)\n", completed.stdout)
    assert found, completed.stdout
    assert found[1] != found[2], "the ranks met on the port another process holds"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_given_port_that_is_taken_is_named(strategy: str) -> None:
    completed = watch.run(
        python("rendezvous.py", strategy, "given"), what=f"{strategy} job", env=script_env()
    )
    assert completed.returncode != 0
    taken = re.search(r"taken port (\d+)", completed.stdout)
    assert taken, completed.stdout
    assert re.search(
        rf"MisconfigurationError: cannot listen on port {taken[1]} for the job's processes "
        r"\(the cluster environment's main port, e.g. MASTER_PORT\): .*EADDRINUSE.*; free it, "
        r"or choose another port\n",
        completed.stderr,
    ), completed.stderr[-3000:]


def test_a_rank_that_starts_later_than_the_timeout_still_joins() -> None:
    # The strategy's timeout bounds its collectives, not the wait for its processes to start:
    # rank 1 reaches the rendezvous 6 s after rank 0, the timeout is 2 s.
    completed = watch.run(python("rendezvous.py", "ddp", "late"), what="ddp job", env=script_env())
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "sum 1, met on" in completed.stdout, completed.stdout
