"""torch's fully sharded data parallelism (FSDP2, ``torch.distributed.fsdp.fully_shard``).

Parameters, gradients and optimizer states are split across the processes; each forward and
backward pass gathers a group's parameters just before it runs and frees them right after.
Groups are formed by an auto-wrap policy: every submodule it selects gets its own
``fully_shard`` call (bottom-up), and the root module takes whatever is left.

FSDP2 runs on any device torch.distributed supports, the CPU with gloo included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from stratcore.exceptions import MisconfigurationError
from stratcore.parallel import ParallelStrategyBase
from stratcore.precision.base import MixedPrecisionBase
from torch import nn
from torch.optim import Optimizer

from .activation_checkpointing import layer_matcher
from .fully_shard import ShardedStateDicts, fsdp2, is_fsdp_module, lay_out
from .mesh import (
    HYBRID_DIMS,
    ShardingLayout,
    build_mesh,
    check_mesh_layout,
    sharding_layout,
    sharding_strategy_name,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy


class FSDPStrategyBase(ShardedStateDicts, ParallelStrategyBase):
    """Shards the model with FSDP2's ``fully_shard``.

    Options:

    - ``auto_wrap_min_params``: a submodule whose parameters, minus those of submodules
      already wrapped, number at least this many becomes its own group.
    - ``auto_wrap_layers``: submodules of these classes each become a group, whatever their
      size. Give classes, import paths (``"torch.nn.Linear"``, ``"mypkg.model:Block"``) or
      bare class names (``"Block"``, matched against each submodule's class and its bases).
    - ``cpu_offload``: keep sharded parameters, gradients and optimizer states in host
      memory (FSDP2's ``CPUOffloadPolicy``); the optimizer step then runs on the CPU. On a
      CPU-only machine everything lives in host memory already, so this only changes which
      code path FSDP takes.
    - ``reshard_after_forward``: free gathered parameters after the forward pass (and gather
      them again for backward); None lets the sharding strategy decide.
    - ``sharding_strategy``: Lightning's names, mapped onto FSDP2 by ``mesh.sharding_layout``:
      'FULL_SHARD' (the default), 'SHARD_GRAD_OP', 'NO_SHARD', 'HYBRID_SHARD' (a
      ``(replicate, shard)`` mesh: sharded within a node, replicated across nodes) and
      '_HYBRID_SHARD_ZERO2'.
    - ``device_mesh``: the ``(replicate, shard)`` sizes of hybrid sharding (or a DeviceMesh);
      None means ``(num_nodes, processes per node)``.
    - ``activation_checkpointing_policy``: layer classes (as for ``auto_wrap_layers``) whose
      activations are recomputed in backward instead of kept from forward.

    Optimizers created before ``setup``: ``fully_shard`` replaces every parameter of the module
    with a new sharded parameter (a DTensor), so an optimizer built on ``model.parameters()``
    beforehand would update tensors the model no longer uses. ``setup`` therefore rebinds each
    optimizer's parameter groups, in place and in order, to the parameters that replaced them
    (matched by name). This is only possible while the optimizer holds no state yet; load
    optimizer state after ``setup``. Parameters outside the module are refused.

    Checkpoints: with ``state_dict_type="sharded"``, ``save_checkpoint`` writes a folder in
    which every process stores its own shards (``torch.distributed.checkpoint``); nothing is
    gathered, and loading reshards to any number of processes (see ``sharded_checkpoint``).
    With ``"full"`` (the default) it writes one ordinary file from rank 0.

    State dicts: ``get_module_state_dict`` and ``get_optimizer_state`` gather the full,
    unsharded tensors into host memory on rank 0; the other ranks take part in the gathering
    and get an empty dict (a full copy in every process would multiply host memory by the
    number of processes per node, and checkpoints are written by rank 0). The optimizer
    state is keyed by parameter name. Loading expects the full dicts on every rank (as
    ``load_checkpoint`` provides); each rank keeps its own shard.

    Mixed precision comes from the precision plugin (``FSDPPrecisionBase``) as FSDP2's
    ``MixedPrecisionPolicy``. Subclasses customise the sharding by overriding
    ``configure_fsdp``, ``fsdp_kwargs`` or ``auto_wrap_modules``.
    """

    wrapper: ClassVar[str] = "fsdp"

    auto_wrap_min_params: int | None = None
    auto_wrap_layers: Sequence[Any] | None = None
    cpu_offload: bool = False
    reshard_after_forward: bool | None = None
    state_dict_type: str = "full"
    sharding_strategy: str = "FULL_SHARD"
    activation_checkpointing_policy: Sequence[Any] | None = None

    _device_mesh: DeviceMesh | None = None
    #: The ``device_mesh`` option as given: sizes, a DeviceMesh, or None.
    _mesh_option: Any = None

    # -- configuration -----------------------------------------------------------------------

    @property
    def saves_sharded(self) -> bool:
        return self.state_dict_type == "sharded"

    @property
    def reads_sharded_checkpoints(self) -> bool:
        return True

    # -- wrapping --------------------------------------------------------------------------

    @property
    def device_mesh(self) -> Any:
        """The mesh ``fully_shard`` runs on, once ``setup`` has built it; before that, the
        ``device_mesh`` option as given (sizes, a DeviceMesh or None). Reading it never
        connects the processes."""
        return self._device_mesh if self._device_mesh is not None else self._mesh_option

    @device_mesh.setter
    def device_mesh(self, device_mesh: Any) -> None:
        """The ``device_mesh`` option: ``(replicate, shard)`` sizes, a DeviceMesh, or None."""
        self._mesh_option = device_mesh
        self._device_mesh = None

    def _mesh(self) -> DeviceMesh:
        """The mesh ``fully_shard`` runs on, built on first use, over every process and on this
        process's device type: one-dimensional, or ``(replicate, shard)`` for hybrid and
        unsharded layouts."""
        if self._device_mesh is None:
            if self._mesh_option is not None and not isinstance(self._mesh_option, Sequence):
                self._device_mesh = self._mesh_option  # the user's own DeviceMesh
            else:
                shape = self.sharding_layout().mesh_shape
                names = HYBRID_DIMS if len(shape) == 2 else None
                self._device_mesh = build_mesh(self.root_device.type, shape, names)
        return self._device_mesh

    def sharding_layout(self) -> ShardingLayout:
        """The mesh shape and resharding the ``sharding_strategy`` stands for."""
        return sharding_layout(
            self.sharding_strategy, self._mesh_option, self.world_size, self.num_nodes
        )

    def validate_configuration(self) -> None:
        super().validate_configuration()
        if self.state_dict_type not in ("full", "sharded"):
            raise MisconfigurationError(
                f"state_dict_type={self.state_dict_type!r} is not allowed; use 'full' or 'sharded'"
            )
        name = sharding_strategy_name(self.sharding_strategy)
        check_mesh_layout(self._mesh_option)
        if self._mesh_option is not None and "HYBRID" not in name:
            self.sharding_layout()  # raises, saying which strategy takes a mesh

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        layout = lay_out(
            module,
            optimizers,
            lambda m: (self.configure_fsdp(m), None),
            self.activation_checkpointing_policy,
        )
        return layout, optimizers

    def configure_fsdp(self, module: nn.Module) -> nn.Module:
        """Shard ``module`` in place: each auto-wrapped submodule, then the root."""
        fully_shard = fsdp2().fully_shard
        for submodule in self.auto_wrap_modules(module):
            fully_shard(submodule, mesh=self._mesh(), **self.fsdp_kwargs(root=False))
        fully_shard(module, mesh=self._mesh(), **self.fsdp_kwargs(root=True))
        return module

    def fsdp_kwargs(self, root: bool = True) -> dict[str, Any]:
        """Keyword arguments for a ``fully_shard`` call (besides the mesh); ``root`` tells
        whether the call is for the root module or for an auto-wrapped submodule."""
        kwargs: dict[str, Any] = {}
        reshard = self.reshard_after_forward
        if reshard is None:
            reshard = self.sharding_layout().reshard_after_forward
        if reshard is not None:
            kwargs["reshard_after_forward"] = reshard
        policy = self.mixed_precision_policy(root)
        if policy is not None:
            kwargs["mp_policy"] = policy
        offload = self.offload_policy()
        if offload is not None:
            kwargs["offload_policy"] = offload
        return kwargs

    def mixed_precision_policy(self, root: bool = True) -> MixedPrecisionPolicy | None:
        """FSDP2's mixed-precision policy for the precision plugin's dtypes, or None in full
        precision."""
        plugin = self.precision_plugin
        return (
            plugin.mixed_precision_policy(root) if isinstance(plugin, FSDPPrecisionBase) else None
        )

    def offload_policy(self) -> OffloadPolicy | None:
        """FSDP2's CPU offload policy where ``cpu_offload`` is set, else None."""
        if not self.cpu_offload:
            return None
        # Pinned host memory speeds up copies to an accelerator; there is none to copy to
        # when training on the CPU, and pinning needs one.
        return fsdp2().CPUOffloadPolicy(pin_memory=self.root_device.type != "cpu")

    def auto_wrap_modules(self, module: nn.Module) -> list[nn.Module]:
        """The submodules (not ``module`` itself) that get their own group, innermost first."""
        layers = self._auto_wrap_layer_matcher()
        threshold = self.auto_wrap_min_params
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1
        ):
            raise MisconfigurationError(
                f"auto_wrap_min_params={threshold!r} is not allowed; use a positive number of parameters or None"
            )
        if layers is None and threshold is None:
            return []
        owners = _parameter_owners(module)
        selected: list[nn.Module] = []
        claimed: set[int] = set()
        for name, submodule in _innermost_first(module):
            if submodule is module:
                continue
            own = [p for p in submodule.parameters() if id(p) not in claimed]
            by_layer = layers is not None and layers(submodule)
            by_size = threshold is not None and sum(p.numel() for p in own) >= threshold
            if not ((by_layer or by_size) and own):
                continue
            # A parameter shared with a module outside this one (tied embeddings) must stay in
            # one group with every module using it: leave it to an enclosing group.
            shared = _shared_outside(name, own, owners)
            if shared is not None:
                if by_layer:
                    raise MisconfigurationError(
                        f"auto_wrap_layers selects {name!r} ({type(submodule).__name__}), whose "
                        f"parameter {shared[0]!r} is shared with {shared[1]!r} outside it; FSDP needs "
                        "shared parameters in one group: wrap a module that contains both, or leave "
                        f"{type(submodule).__name__} out of auto_wrap_layers"
                    )
                continue
            selected.append(submodule)
            claimed.update(id(p) for p in own)
        return selected

    def _auto_wrap_layer_matcher(self) -> Callable[[nn.Module], bool] | None:
        if self.auto_wrap_layers is None:
            return None
        return layer_matcher(self.auto_wrap_layers, "auto_wrap_layers")

    # -- steps ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        model = self._model
        if model is None or not is_fsdp_module(model):
            yield
            return
        model.set_requires_gradient_sync(False)  # type: ignore[operator]
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)  # type: ignore[operator]

    # -- checkpoints ---------------------------------------------------------------------

    def teardown(self) -> None:
        model = self._sharded_model()
        self.release_sharded_model([model] if model is not None else [])


class FSDPPrecisionBase(MixedPrecisionBase):
    """Mixed precision for fully sharded strategies.

    The sharded parameters stay in float32 (the optimizer updates float32 values); each
    gathered copy is cast to float16 or bfloat16 for the forward and backward computation,
    gradients are reduced in float32, and the module's outputs come back as float32. The
    sharding wrapper applies this, so forward passes need no autocast. For '16-mixed' on
    devices that need it, a sharded gradient scaler (``grad_scaler``) scales the loss.
    """

    wraps_forward = False

    def mixed_precision_policy(self, root: bool = True) -> MixedPrecisionPolicy:
        """FSDP2's policy for this precision, for the root module or a wrapped submodule.

        Only the root casts its outputs back to float32: an inner group handing float32
        to the next layer would meet parameters gathered in half precision.
        """
        return fsdp2().MixedPrecisionPolicy(
            param_dtype=self.dtype,
            reduce_dtype=torch.float32,
            output_dtype=torch.float32 if root else None,
        )


# -- helpers ---------------------------------------------------------------------------------


def _innermost_first(module: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """Every submodule, with its name, after all of its own submodules (reversed pre-order)."""
    return reversed(list(module.named_modules()))


def _parameter_owners(module: nn.Module) -> dict[int, list[tuple[str, str]]]:
    """For each parameter, every (module name, parameter name) that registers it; more than
    one where parameters are tied or modules shared."""
    owners: dict[int, list[tuple[str, str]]] = {}
    for name, submodule in module.named_modules(remove_duplicate=False):
        for parameter_name, parameter in submodule.named_parameters(recurse=False):
            owners.setdefault(id(parameter), []).append((name, parameter_name))
    return owners


def _shared_outside(
    name: str, parameters: list[nn.Parameter], owners: Mapping[int, list[tuple[str, str]]]
) -> tuple[str, str] | None:
    """A parameter of module ``name`` that a module outside it also registers, as the full
    names of both uses; None if there is none."""

    def qualified(owner: tuple[str, str]) -> str:
        return f"{owner[0]}.{owner[1]}" if owner[0] else owner[1]

    for parameter in parameters:
        uses = owners.get(id(parameter), [])
        inside = [use for use in uses if use[0] == name or use[0].startswith(f"{name}.")]
        outside = [use for use in uses if use not in inside]
        if inside and outside:
            return qualified(inside[0]), qualified(outside[0])
    return None
