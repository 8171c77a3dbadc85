"""Save one large checkpoint with the package's TorchCheckpointIO (the test kills it midway)."""

from __future__ import annotations

import sys

import torch

from stratlib import TorchCheckpointIO

if __name__ == "__main__":
    path, megabytes = sys.argv[1], int(sys.argv[2])
    weights = torch.ones(megabytes * 1024 * 1024 // 4)
    print("saving", flush=True)
    TorchCheckpointIO().save_checkpoint({"weights": weights, "version": 2}, path)
    print("saved", flush=True)
