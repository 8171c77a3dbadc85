"""The example job of the generated environment tests: what they set an environment's variables
to, and what they expect read back.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .environments import ENVIRONMENT_VALUES

#: The job every generated environment test describes: four processes on two nodes, seen from
#: the second process of the second node, its rendezvous at 10.1.2.3:29400. A test sets a
#: cluster environment's own variables to these values and expects them read back, except where
#: the environment derives a value otherwise (SLURM's address from its node list, a port from
#: the job id), which the test then states.
EXAMPLE_JOB: Mapping[str, Any] = MappingProxyType(
    dict(zip(ENVIRONMENT_VALUES, (4, 3, 1, 1, "10.1.2.3", 29400), strict=True))
)
