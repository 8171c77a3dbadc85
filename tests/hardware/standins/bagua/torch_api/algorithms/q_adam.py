"""Stand-in for ``bagua.torch_api.algorithms.q_adam``."""

from __future__ import annotations

import torch


class QAdamOptimizer(torch.optim.Adam):
    """Bagua's QAdam optimizer; here plain Adam."""
