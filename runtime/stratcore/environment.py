"""Cluster environments, described by data: when they apply and where each value comes from.

A generated environment sets ``detect_condition`` (a ``Condition`` on environment variables) and one
``ValueSource`` per value: world size, global/local/node rank, and the rendezvous address and
port. Scheduler-specific formats (SLURM node lists, LSF rank files, job-id-derived ports) are
read by the named parsers below.
"""

from __future__ import annotations

import os
import re
import socket
import stat
from typing import Any, ClassVar

from .contract import Condition, ValueSource
from .exceptions import MisconfigurationError
from .imports import Requirement, require

# --- parsers -----------------------------------------------------------------------------------


def _slurm_first_host(variable: str, value: str) -> str:
    """First host of a SLURM host list.

    Host lists join entries with commas; an entry may hold several bracketed ranges, each
    a comma list of numbers or zero-padded intervals: 'gpu[003-007,9],cpu1' -> 'gpu003',
    'rack[2-3]-node[01-04]' -> 'rack2-node01', 'node[7,2]-ib' -> 'node7-ib'.
    """
    text = value.strip()
    depth = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char in ", " and depth == 0:
            text = text[:index]
            break
        if depth not in (0, 1):
            raise ValueError(f"{variable}={value!r} is not a SLURM host list (unbalanced brackets)")
    if depth != 0 or not text:
        raise ValueError(f"{variable}={value!r} is not a SLURM host list")

    def first(match: re.Match[str]) -> str:
        item = match.group(1).split(",")[0].strip()
        start = item.split("-")[0]
        if not start.isdigit():
            raise ValueError(f"{variable}={value!r}: [{match.group(1)}] is not a range of numbers")
        return start

    host = re.sub(r"\[([^\]]*)\]", first, text)
    if not host or "[" in host or "]" in host:
        raise ValueError(f"{variable}={value!r} is not a SLURM host list")
    return host


def _job_port(job_variable: str) -> Any:
    def parse(variable: str, value: str) -> int:
        if variable != job_variable:
            return int(value)
        digits = re.sub(r"\D", "", value)
        if not digits:
            raise ValueError(f"{variable}={value!r} has no digits to derive a port from")
        return 15000 + int(digits[-4:])

    return parse


#: The most an LSF rank file is read of (a line per slot: far more than any job's).
MAX_RANK_FILE_BYTES = 16 * 1024 * 1024


def _lsf_hosts(variable: str, value: str) -> list[str]:
    """Compute hosts from an LSF rank file; its first line is the launch node and is skipped.
    Only a regular file is read, and at most ``MAX_RANK_FILE_BYTES`` of it."""
    fd = os.open(value, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"the rank file {variable}={value} is not a regular file")
        data = handle.read(MAX_RANK_FILE_BYTES + 1)
    if len(data) > MAX_RANK_FILE_BYTES:
        raise ValueError(f"the rank file {variable}={value} is larger than any rank file")
    hosts = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
    if len(hosts) < 2:
        raise ValueError(f"the rank file {variable}={value} lists no compute host")
    return hosts[1:]


def _lsf_first_host(variable: str, value: str) -> str:
    return _lsf_hosts(variable, value)[0]


def _lsf_node_rank(variable: str, value: str) -> int:
    nodes = list(dict.fromkeys(_lsf_hosts(variable, value)))
    here = socket.gethostname()
    for index, host in enumerate(nodes):
        if host == here or host.split(".")[0] == here.split(".")[0]:
            return index
    raise ValueError(f"this host ({here}) is not in the rank file {value}")


PARSERS: dict[str, Any] = {
    "int": lambda variable, value: int(value),
    "str": lambda variable, value: value,
    "slurm_first_host": _slurm_first_host,
    "slurm_job_port": _job_port("SLURM_JOB_ID"),
    "lsf_first_host": _lsf_first_host,
    "lsf_node_rank": _lsf_node_rank,
    "lsf_job_port": _job_port("LSB_JOBID"),
}


#: The largest number of processes or rank torch.distributed takes (a C int).
MAX_RANKS = 2**31 - 1
#: What a launch variable may be, inclusive; a rank is also below the world size
#: (``global_rank``).
RANGES: dict[str, tuple[int, int | None]] = {
    "main_port": (1, 65535),
    "world_size": (1, MAX_RANKS),
    "global_rank": (0, MAX_RANKS - 1),
    "local_rank": (0, MAX_RANKS - 1),
    "node_rank": (0, MAX_RANKS - 1),
}


def int_variable(name: str, default: int, low: int, high: int | None = None) -> int:
    """The whole number in the environment variable ``name`` (``default`` where it is unset or
    empty), in ``[low, high]``: else one line naming the variable."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    expected = f"{low}-{high}" if high is not None else f"{low} or more"
    text = value.strip()
    if not text.lstrip("+-").isdigit() or not (
        low <= int(text) and (high is None or int(text) <= high)
    ):
        raise MisconfigurationError(f"{name}={value!r}: expected a whole number, {expected}")
    return int(text)


#: Addresses that resolved in this process (a failure is asked again: it may be passing).
_RESOLVED: set[str] = set()


def unresolvable(address: str) -> str | None:
    """Why ``address`` (a host name or an IP address) does not resolve, or None: a rank would
    otherwise try to connect to it until its timeout."""
    if address in _RESOLVED:
        return None
    try:
        socket.getaddrinfo(address, None)
    except (OSError, UnicodeError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    _RESOLVED.add(address)
    return None


def find_free_port() -> int:
    """A TCP port on this host that no process listens on at the moment (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the base class ------------------------------------------------------------------------------


class ClusterEnvironmentBase:
    """Base class of cluster environments.

    ``detect()`` says whether this process runs under the environment. The rank and size
    methods read the variables the scheduler set; environments marked ``settable`` (the
    default one, filled in by the strategy's own launcher) accept values from the strategy.
    """

    name: ClassVar[str | None] = None
    detect_condition: ClassVar[Condition] = Condition()
    creates_processes_externally_condition: ClassVar[Condition] = Condition(always=True)
    settable: ClassVar[bool] = False
    world_size_source: ClassVar[ValueSource] = ValueSource(default=1)
    global_rank_source: ClassVar[ValueSource] = ValueSource(default=0)
    local_rank_source: ClassVar[ValueSource] = ValueSource(default=0)
    node_rank_source: ClassVar[ValueSource] = ValueSource(default=0)
    main_address_source: ClassVar[ValueSource] = ValueSource(default="127.0.0.1")
    main_port_source: ClassVar[ValueSource] = ValueSource(fallback="free_port")
    #: The layout an environment that places processes itself may say (``LAYOUT_VALUES``);
    #: a source that names no variable says nothing.
    local_world_size_source: ClassVar[ValueSource] = ValueSource()
    device_source: ClassVar[ValueSource] = ValueSource()
    #: Environments whose variables this one's processes may carry too (Ray started by srun):
    #: a strategy that lists both lists this one first.
    runs_inside: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[tuple[Requirement, ...]] = ()

    def __init__(self) -> None:
        require(self.requires, type(self).__name__)
        #: Values the strategy set (``set_world_size``, ``set_global_rank``), by key.
        self._assigned: dict[str, int] = {}
        self._computed: dict[str, Any] = {}

    @classmethod
    def detect(cls) -> bool:
        """Whether the current process runs under this environment."""
        return cls.detect_condition.holds() and all(r.available for r in cls.requires)

    @property
    def creates_processes_externally(self) -> bool:
        """Whether processes are started by the environment rather than the strategy."""
        return self.creates_processes_externally_condition.holds()

    # -- reading values -------------------------------------------------------------------

    def _read(self, key: str, as_int: bool) -> Any:
        return self._read_with_origin(key, as_int)[0]

    def _read_with_origin(self, key: str, as_int: bool) -> tuple[Any, str]:
        """A value and where it came from (``VARIABLE='value'``, or "its default"), checked
        against ``RANGES``."""
        source: ValueSource = getattr(self, f"{key}_source")
        for variable in source.env:
            value = os.environ.get(variable)
            if value is None or value == "":
                continue
            parser = PARSERS[source.parse or ("int" if as_int else "str")]
            origin = f"{variable}={value!r}"
            try:
                result = parser(variable, value)
                result = int(result) if as_int else result
            except (ValueError, OSError) as exc:
                raise MisconfigurationError(
                    f"{type(self).__name__}: cannot read {key} from {origin}: {exc}"
                ) from None
            self._check_range(key, result, origin)
            return result, origin
        return self._unread(key, as_int, source), "its default"

    def _check_range(self, key: str, value: Any, origin: str) -> None:
        low, high = RANGES.get(key, (None, None))
        if low is not None and (value < low or (high is not None and value > high)):
            expected = f"{low}-{high}" if high is not None else f"{low} or more"
            raise MisconfigurationError(
                f"{type(self).__name__}: {key} from {origin} is out of range: expected {expected}"
            )

    def _unread(self, key: str, as_int: bool, source: ValueSource) -> Any:
        """A value no variable gives: the default, or the fallback's."""
        if source.default is not None:
            return int(source.default) if as_int else source.default
        if source.fallback is not None:
            if key not in self._computed:
                self._computed[key] = self._fallback(source.fallback)
            return self._computed[key]
        names = ", ".join(source.env) or "(no variable)"
        raise MisconfigurationError(f"{type(self).__name__}: {key} is not set; expected {names}")

    def _fallback(self, name: str) -> Any:
        if name == "free_port":
            return find_free_port()
        if name == "hostname":
            return socket.gethostname()
        if name == "ranks_per_node":
            for variable in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
                if os.environ.get(variable):
                    return self.global_rank() // int_variable(variable, 1, 1)
            return 0
        raise MisconfigurationError(f"unknown fallback {name!r}")  # pragma: no cover

    @property
    def main_address(self) -> str:
        """Address of the node that holds rank 0, from the environment's variables or their
        default."""
        return str(self._read("main_address", as_int=False))

    def resolved_main_address(self) -> str:
        """``main_address``, checked to resolve, for a process about to connect to it: one
        line naming the variable instead of retrying the connection until the timeout."""
        address, origin = self._read_with_origin("main_address", as_int=False)
        problem = unresolvable(str(address))
        if problem:
            raise MisconfigurationError(
                f"{type(self).__name__}: main_address from {origin} does not resolve to an "
                f"address: {problem}"
            )
        return str(address)

    @property
    def main_port(self) -> int:
        """Port of the job's rendezvous on the node of rank 0."""
        return int(self._read("main_port", as_int=True))

    def _assigned_or_read(self, key: str) -> int:
        if key in self._assigned:
            return self._assigned[key]
        return int(self._read(key, as_int=True))

    def given_main_port(self) -> int | None:
        """The main port the job was given (a variable or a default), or None where the
        environment leaves the choice to whoever starts the processes (the ``free_port``
        fallback): a launcher then binds a port of the kernel's choosing and says which
        (``set_main_port``), so that no other process can take it in between."""
        source = self.main_port_source
        if (
            source.fallback == "free_port"
            and source.default is None
            and not any(os.environ.get(variable) for variable in source.env)
        ):
            return None
        return self.main_port

    def set_main_port(self, port: int) -> None:
        """Set by the launcher whose rendezvous store listens on ``port``, where the choice was
        left to it (see ``given_main_port``)."""
        self._computed["main_port"] = port

    def world_size(self) -> int:
        """Number of processes in the job: set by the strategy where the environment is settable,
        else read."""
        return self._assigned_or_read("world_size")

    def set_world_size(self, size: int) -> None:
        """Set by the strategy; ignored where the scheduler decides the world size."""
        if self.settable:
            self._assigned["world_size"] = size

    def global_rank(self) -> int:
        """Rank of this process among all processes of the job: in ``[0, world_size)``."""
        if "global_rank" in self._assigned:
            return self._assigned["global_rank"]
        rank, origin = self._read_with_origin("global_rank", as_int=True)
        try:
            size = self.world_size()
        except MisconfigurationError:
            return int(rank)  # the world size's own error is raised where it is read
        if rank >= size:
            raise MisconfigurationError(
                f"{type(self).__name__}: global_rank from {origin} is out of range: expected "
                f"0-{size - 1} (the world size is {size})"
            )
        return int(rank)

    def set_global_rank(self, rank: int) -> None:
        """Set by the strategy; ignored where the scheduler decides ranks."""
        if self.settable:
            self._assigned["global_rank"] = rank

    def local_rank(self) -> int:
        """Rank of this process among the processes of its node."""
        return int(self._read("local_rank", as_int=True))

    def node_rank(self) -> int:
        """Rank of this process's node among the job's nodes."""
        return int(self._read("node_rank", as_int=True))

    # -- the layout, where the environment says it ---------------------------------------

    def _said(self, key: str, as_int: bool) -> Any:
        """A value of ``LAYOUT_VALUES``, or None where the environment says nothing of it (its
        source names no variable that is set, and has no default)."""
        source: ValueSource = getattr(self, f"{key}_source")
        if source.default is None and not any(os.environ.get(name) for name in source.env):
            return None
        return self._read(key, as_int=as_int)

    def local_world_size(self) -> int | None:
        """Number of processes the environment started on this node, where it says (Ray, which
        places processes on nodes of its choosing, not always as many on each); else None."""
        value = self._said("local_world_size", as_int=True)
        return None if value is None else int(value)

    def device(self) -> str | None:
        """The device the environment gave this process, as torch names it ('cuda:1'), where
        it says (Ray Train's workers); else None. A strategy trains on it where it is one of
        its devices (see ``choose_device``)."""
        value = self._said("device", as_int=False)
        return None if value is None else str(value)

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Fail if the devices and nodes asked for contradict what the scheduler started.

        Where the environment says how many processes it started on this node
        (``local_world_size``), it chose the nodes: one device per process, or as many devices
        as processes on this node, with ``num_nodes`` left at 1, agree with any number of
        nodes, equal or not.
        """
        if self.settable:
            return
        expected = num_devices * num_nodes
        actual = self.world_size()
        if actual == expected:
            return
        local = self.local_world_size()
        if local is not None and num_nodes == 1 and num_devices in (1, local):
            return
        here = f" ({local} on this node)" if local is not None else ""
        hint = (
            "; leave devices and num_nodes at their defaults to take its layout"
            if local is not None
            else "; make them agree"
        )
        raise MisconfigurationError(
            f"num_nodes={num_nodes} with {num_devices} device(s) per node means {expected} "
            f"processes, but {type(self).__name__} started {actual}{here}{hint}"
        )

    def teardown(self) -> None:
        """Release what the environment holds. Ranks stay readable after training."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
