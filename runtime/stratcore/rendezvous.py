"""The rendezvous of a job that a strategy's own launcher starts: a store no other job can take.

torch.distributed's ``env://`` rendezvous has rank 0 listen on MASTER_PORT when it creates the
process group. A launcher that only picks a free port (bind to port 0, close, hand the number
to the ranks) leaves that port free until then, which on a busy machine is seconds later:
another process may take it meanwhile. Rank 0 then fails with EADDRINUSE while the other ranks
wait for it, or they connect to whatever listens there now, another job's store included.

So the launching process binds the store itself before any rank starts (on a port the kernel
chooses, unless the job was given one) and holds it as long as the job runs, as torchrun's
agent does; every rank connects to it as a client (``joined_store``). Processes started by
anything else (torchrun, a scheduler) keep the ``env://`` rendezvous, whose keys the store
shares: both prefix them with ``default_pg``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING

from .exceptions import MisconfigurationError

if TYPE_CHECKING:
    import torch.distributed as dist

#: Set for the ranks of a job whose launcher hosts the store: ``address:port`` of that store.
HOSTED_STORE_ENV = "STRATLIB_HOSTED_STORE"
#: The prefix ``init_process_group`` gives the keys of an ``env://`` rendezvous.
_GROUP_PREFIX = "default_pg"


class HostedStore:
    """The store of a job, listening from before its first rank starts until ``close``."""

    def __init__(self, address: str, port: int | None, world_size: int, timeout: float) -> None:
        from torch.distributed import TCPStore

        try:
            # multi_tenant: an ``env://`` rendezvous in this process (a library that creates the
            # group itself) reuses this server instead of binding the port a second time.
            self._store: TCPStore | None = TCPStore(
                address,
                port or 0,
                world_size,
                is_master=True,
                timeout=timedelta(seconds=timeout),
                wait_for_workers=False,
                multi_tenant=True,
            )
        except RuntimeError as exc:
            if not port:
                raise
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise MisconfigurationError(
                f"cannot listen on port {port} for the job's processes (the cluster environment's "
                f"main port, e.g. MASTER_PORT): {reason}; free it, or choose another port"
            ) from None
        self.address = address
        self.port = int(self._store.port)

    @property
    def environ(self) -> dict[str, str]:
        """What the job's ranks need to find the store."""
        return {
            "MASTER_ADDR": self.address,
            "MASTER_PORT": str(self.port),
            HOSTED_STORE_ENV: f"{self.address}:{self.port}",
        }

    def close(self) -> None:
        """Stop listening once every user of the store (the process group) is gone."""
        self._store = None


def joined_store(address: str, port: int, world_size: int, timeout: float) -> dist.Store | None:
    """In a rank whose launcher hosts the store at ``address:port``: a client of it, for
    ``init_process_group(store=...)``. None elsewhere (the ``env://`` rendezvous applies)."""
    if os.environ.get(HOSTED_STORE_ENV) != f"{address}:{port}":
        return None
    import torch.distributed as dist

    client = dist.TCPStore(
        address, port, world_size, is_master=False, timeout=timedelta(seconds=timeout)
    )
    return dist.PrefixStore(_GROUP_PREFIX, client)
