"""The example job of the generated environment tests: what they set an environment's variables
to, and what they expect read back.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .environments import ENVIRONMENT_VALUES, LAYOUT_VALUES

#: The job every generated environment test describes: four processes on two nodes, seen from
#: the second process of the second node, its rendezvous at 10.1.2.3:29400. A test sets a
#: cluster environment's own variables to these values and expects them read back, except where
#: the environment derives a value otherwise (SLURM's address from its node list, a port from
#: the job id), which the test then states.
EXAMPLE_JOB: Mapping[str, Any] = MappingProxyType(
    dict(zip(ENVIRONMENT_VALUES, (4, 3, 1, 1, "10.1.2.3", 29400), strict=True))
)

#: The example job's layout, for environments that say it (``LAYOUT_VALUES``): two processes on
#: each node, and the second device of its node given to this one.
EXAMPLE_LAYOUT: Mapping[str, Any] = MappingProxyType(
    dict(zip(LAYOUT_VALUES, (2, "cuda:1"), strict=True))
)

#: A job whose nodes hold unequal numbers of processes, as schedulers that place processes
#: themselves (Ray) may start: three processes, two on the first node, seen from the third,
#: alone on the second node. Its global rank (2) is not ``node_rank * processes per node +
#: local_rank`` for either node's count; an environment that reads the rank must read it as it is.
UNEVEN_JOB: Mapping[str, Any] = MappingProxyType(
    dict(
        zip(
            (*ENVIRONMENT_VALUES, *LAYOUT_VALUES),
            (3, 2, 0, 1, "10.1.2.3", 29400, 1, "cuda:0"),
            strict=True,
        )
    )
)

#: A scheduler's job step of one process, which started another launcher (srun running
#: ``ray start``): what the processes of that launcher inherit of it, besides their own
#: variables.
SINGLE_PROCESS_JOB: Mapping[str, Any] = MappingProxyType(
    dict(
        zip(
            (*ENVIRONMENT_VALUES, *LAYOUT_VALUES),
            (1, 0, 0, 0, "10.1.2.3", 29400, 1, "cuda:0"),
            strict=True,
        )
    )
)
