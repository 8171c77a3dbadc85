"""DeepSpeed's ZeRO engine: optimizer states, gradients and parameters partitioned across the
processes (ZeRO stages 1, 2 and 3), optionally offloaded to CPU memory.

``deepspeed`` is imported only when a strategy sets up its environment, never when the
package is imported. DeepSpeed picks its accelerator class from ``DS_ACCELERATOR`` when it is
first imported; the strategy sets it to the device's DeepSpeed name (the accelerator spec's
``deepspeed_accelerator``, else the device type) before it launches processes, so every
process it starts inherits it, or, for a device whose spec trains on the generated DeepSpeed
accelerator, installs that one (``deepspeed_select.select_for``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Mapping, MutableMapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from stratcore.accelerator import Accelerator
from stratcore.checkpoints.io import PathLike
from stratcore.checkpoints.state import check_entries, is_stateful, restore_entries
from stratcore.exceptions import MisconfigurationError
from stratcore.parallel import ParallelStrategyBase
from torch import nn
from torch.optim import Optimizer

from . import process_groups
from .checkpoint_files import check_folder, weights_only_engine_loads
from .config import (
    CONFIG_DEFAULTS,
    ZERO_STAGES,
    check_deepspeed_accelerator,
    check_offloads,
    cpu_has_fp16_kernels,
    fp16_refused,
    import_deepspeed,
    load_ops_in_turn,
    merge_precision,
    offload_section,
    ops_to_build,
    read_config,
)
from .precision import DeepSpeedPrecisionBase
from .state import (
    full_module_state,
    gather_optimizer_state,
    has_master,
    load_full_module_state,
    restore_optimizer_state,
)

#: Tag of the one checkpoint in a folder written in DeepSpeed's format.
TAG = "checkpoint"


class DeepSpeedStrategyBase(ParallelStrategyBase):
    """Trains through a DeepSpeed engine (``deepspeed.initialize``).

    ``setup(model, optimizer)`` returns the engine, which is the module to call, and the
    engine's optimizer; ``backward`` runs ``engine.backward`` and ``optimizer_step`` runs
    ``engine.step``, which also clears the gradients. One model and at most one optimizer can
    be set up. The optimizer is the one given to ``setup`` or, without one, the one the
    config's ``optimizer`` section names.

    The config is the user's ``config`` (a mapping or a JSON file) with the options filling in
    what it leaves out: ``zero_optimization.stage`` from ``zero_stage``, the offload sections
    from ``offload_optimizer`` and ``offload_parameters``, the fp16/bf16 section from the
    precision plugin, ``train_micro_batch_size_per_gpu`` from ``logging_batch_size_per_gpu``
    (1 by default), and ``CONFIG_DEFAULTS``. ``deepspeed_config()`` returns the result.

    Gradient accumulation: unless the config sets ``managed_gradient_accumulation``, every
    ``optimizer_step`` is an accumulation boundary, so calling ``backward`` several times
    before it sums the gradients (divided by the config's ``gradient_accumulation_steps``,
    1 by default). Stages 0 and 1 communicate once, in the step; stages 2 and 3 reduce each
    gradient partition as backward produces it, which ``block_backward_sync`` cannot defer.

    Checkpoints: ``save_checkpoint`` writes one ordinary file from rank 0, readable with
    ``torch.load(weights_only=True)``, that does not depend on the number of processes:

    - a module is stored as its full state dict, gathered from every rank under stage 3,
      with the float32 master weights of the engine's optimizer in place of 16-bit
      parameters;
    - an optimizer is stored in ``torch.optim.Optimizer.state_dict()`` form: ``param_groups``
      with their hyperparameters and parameter indices (numbered through the groups in
      order, as PyTorch does), and ``state`` with each parameter's full state (momentum
      buffers, Adam moments, ...) gathered from the partitions.

    Loading scatters both back into the partitions of every rank, so a checkpoint saved with
    one ZeRO stage or number of processes loads into another, and into a plain PyTorch
    model and optimizer with the same parameter groups. Gathering is collective: every rank
    takes part in ``save_checkpoint``, ``get_module_state_dict`` and ``get_optimizer_state``.

    With ``state_dict_type="sharded"``, ``save_checkpoint`` writes DeepSpeed's own format
    instead (``engine.save_checkpoint``: every rank writes its partitions, nothing is
    gathered) into a folder, put in place atomically, with the checkpoint's other entries
    in its ``meta.pt``; ``load_checkpoint`` restores it with ``engine.load_checkpoint`` on the
    same number of processes. ``python -m <package>.core.sharded_checkpoint`` turns it into
    one file (the module's float32 weights and the other entries).
    """

    wrapper: ClassVar[str] = "deepspeed"
    #: DeepSpeed's backend declares its barriers with the default group as a default argument.
    group_default_modules = (*ParallelStrategyBase.group_default_modules, "deepspeed.comm.torch")

    zero_stage: int = 2
    offload_optimizer: bool = False
    offload_parameters: bool = False
    offload_optimizer_device: str = "cpu"
    offload_params_device: str = "cpu"
    nvme_path: str | os.PathLike[str] | None = None
    config: Mapping[str, Any] | str | os.PathLike[str] | None = None
    logging_batch_size_per_gpu: int | None = None
    state_dict_type: str = "full"

    _engine: Any = None
    _optimizer_groups: list[list[nn.Parameter]] | None = None
    #: The LOCAL_RANK variable before setup_environment set it, while it is set.
    _saved_local_rank: tuple[str | None] | None = None

    # -- config ----------------------------------------------------------------------------

    def deepspeed_config(self) -> dict[str, Any]:
        """The config handed to ``deepspeed.initialize``; raises for contradictory settings."""
        config = read_config(self.config)
        if not isinstance(config.get("zero_optimization", {}), dict):
            raise MisconfigurationError("config: 'zero_optimization' must be a mapping")
        zero = config.setdefault("zero_optimization", {})
        zero.setdefault("stage", self.zero_stage)
        stage = zero["stage"]
        if isinstance(stage, bool) or stage not in ZERO_STAGES:
            raise MisconfigurationError(
                f"ZeRO stage {stage!r} is not allowed; use one of {', '.join(map(str, ZERO_STAGES))}"
            )
        if self.offload_optimizer:
            zero.setdefault(
                "offload_optimizer", offload_section(self.offload_optimizer_device, self.nvme_path)
            )
        if self.offload_parameters:
            zero.setdefault(
                "offload_param", offload_section(self.offload_params_device, self.nvme_path)
            )
        check_offloads(zero, stage)
        if "train_batch_size" not in config and "train_micro_batch_size_per_gpu" not in config:
            config["train_micro_batch_size_per_gpu"] = self.logging_batch_size_per_gpu or 1
        for key, value in CONFIG_DEFAULTS.items():
            config.setdefault(key, value)
        plugin = self.precision_plugin
        sections = plugin.deepspeed_config() if isinstance(plugin, DeepSpeedPrecisionBase) else {}
        merge_precision(config, sections, plugin.precision)
        return config

    @classmethod
    def precision_refused(cls, precision: str, accelerator: type[Accelerator]) -> str | None:
        """Besides the accelerator's probes: DeepSpeed's CPU accelerator trains in float16 only
        where torch's oneDNN has float16 kernels for this CPU (its ``is_fp16_supported``,
        deepspeed/accelerator/cpu_accelerator.py). Other DeepSpeed accelerators answer when
        the strategy sets up (``check_deepspeed_accelerator``), on the device itself."""
        refused = super().precision_refused(precision, accelerator)
        if refused is not None or not precision.startswith("16"):
            return refused
        if (accelerator.deepspeed_accelerator or accelerator.device_type) != "cpu":
            return None
        return None if cpu_has_fp16_kernels() else fp16_refused(precision, "cpu")

    # -- environment -----------------------------------------------------------------------

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.select_deepspeed_accelerator()
        # Mistakes in the options or the config surface here, before any process starts.
        self.deepspeed_config()
        return super().launch(function, *args, **kwargs)

    def select_deepspeed_accelerator(self) -> str:
        """Make DeepSpeed train on the accelerator class for this strategy's device (see
        ``deepspeed_select.select_for``, imported when a strategy is used); returns what
        selects it."""
        from .select import select_for

        return select_for(type(self.accelerator))

    def setup_environment(self) -> None:
        if self._environment_ready:
            return
        selection = self.select_deepspeed_accelerator()
        super().setup_environment()
        deepspeed = import_deepspeed(type(self).__name__)
        check_deepspeed_accelerator(
            self.root_device.type, selection, self.precision_plugin.precision
        )
        # deepspeed.initialize reads the local rank from the environment; teardown restores it,
        # because a LOCAL_RANK left behind would make the next launch think it was started for
        # a rank.
        self._saved_local_rank = (os.environ.get("LOCAL_RANK"),)
        os.environ["LOCAL_RANK"] = str(self.local_rank)
        from deepspeed.accelerator import get_accelerator

        load_ops_in_turn(ops_to_build(self.deepspeed_config(), get_accelerator().device_name()))
        deepspeed.init_distributed(
            dist_backend=self.collective_backend.process_group_name, auto_mpi_discovery=False
        )

    # -- model and optimizers --------------------------------------------------------------

    def setup_module_and_optimizers(
        self, module: nn.Module, optimizers: list[Optimizer]
    ) -> tuple[nn.Module, list[Optimizer]]:
        if self._engine is not None:
            raise MisconfigurationError(
                f"{type(self).__name__} sets up one model; it already holds a DeepSpeed engine"
            )
        if len(optimizers) > 1:
            raise MisconfigurationError(
                f"DeepSpeed drives one optimizer per model; setup() got {len(optimizers)}"
            )
        import deepspeed

        config = self.deepspeed_config()
        optimizer = optimizers[0] if optimizers else None
        if optimizer is not None and "optimizer" in config:
            raise MisconfigurationError(
                "the DeepSpeed config names an optimizer and setup() got one as well; pass the "
                "optimizer to setup() or name it in the config's 'optimizer' section, not both"
            )
        if optimizer is not None:
            groups = [list(group["params"]) for group in optimizer.param_groups]
        else:
            groups = [[p for p in module.parameters() if p.requires_grad]]
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            model=module,
            optimizer=optimizer,
            model_parameters=groups[0] if optimizer is None and "optimizer" in config else None,
            config=config,
            dist_init_required=False,
        )
        self._engine = engine
        if ds_optimizer is None:
            return engine, []
        self._optimizer_groups = groups
        return engine, [ds_optimizer]

    @property
    def engine(self) -> Any:
        """The DeepSpeed engine created by ``setup`` (None before)."""
        return self._engine

    def _require_engine(self, what: str) -> Any:
        if self._engine is None:
            raise MisconfigurationError(f"{what} needs the DeepSpeed engine; call setup() first")
        return self._engine

    def _owns(self, module: nn.Module) -> bool:
        engine = self._engine
        return engine is not None and (module is engine or module is engine.module)

    # -- training steps --------------------------------------------------------------------

    def _backward(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self._require_engine("backward()").backward(tensor, *args, **kwargs)

    def optimizer_step(
        self, optimizer: Optimizer | None = None, *, zero_grad: bool = True, **kwargs: Any
    ) -> Any:
        """Run ``engine.step()``, which updates the parameters and clears the gradients."""
        if not zero_grad:
            raise MisconfigurationError(
                "zero_grad=False is not possible with DeepSpeed: engine.step() always clears the gradients"
            )
        return super().optimizer_step(optimizer, zero_grad=False, **kwargs)

    def _optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        engine = self._require_engine("optimizer_step()")
        if optimizer is not engine.optimizer:
            raise MisconfigurationError(
                "optimizer_step() takes the optimizer that setup() returned for the DeepSpeed engine"
            )
        return engine.step(**kwargs)

    def clip_gradients(
        self, module: nn.Module, optimizer: Optimizer, max_norm: float
    ) -> torch.Tensor:
        raise MisconfigurationError(
            "DeepSpeed clips gradients inside engine.step(); set 'gradient_clipping' in the config, "
            f"e.g. config={{'gradient_clipping': {max_norm!r}}}"
        )

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Accumulate gradients over the backward passes inside the block.

        With the default unmanaged accumulation every backward accumulates until the next
        ``optimizer_step`` anyway (see the class documentation). When the config turns on
        ``managed_gradient_accumulation``, stages 0 and 1 skip their reduction here through
        ``engine.no_sync()``; stages 2 and 3 cannot, and raise.
        """
        engine = self._engine
        if engine is None or not engine.managed_gradient_accumulation():
            yield
            return
        stage = engine.zero_optimization_stage()
        if stage >= 2:
            raise MisconfigurationError(
                f"block_backward_sync() cannot skip gradient reduction under ZeRO stage {stage}, which "
                "partitions gradients during backward; with managed_gradient_accumulation the config's "
                "gradient_accumulation_steps decides when the engine steps, so call backward() outside "
                "the block"
            )
        with engine.no_sync():
            yield

    # -- checkpoints -----------------------------------------------------------------------

    def get_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The full state dict of the engine's module, float32 masters in place of 16-bit
        parameters where the engine's optimizer keeps them. Every rank must call this."""
        if not self._owns(module):
            return super().get_module_state_dict(module)
        return full_module_state(self._engine)

    def load_module_state_dict(
        self, module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True
    ) -> None:
        if not self._owns(module):
            super().load_module_state_dict(module, state_dict, strict)
            return
        load_full_module_state(self._engine, state_dict, strict)

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The optimizer's state in PyTorch's format, gathered from every partition. Every rank
        must call this."""
        groups = self._groups_of(optimizer)
        if groups is None:
            return super().get_optimizer_state(optimizer)
        return gather_optimizer_state(optimizer, groups)

    def load_optimizer_state_dict(
        self, optimizer: Optimizer, state_dict: Mapping[str, Any]
    ) -> None:
        groups = self._groups_of(optimizer)
        if groups is None:
            super().load_optimizer_state_dict(optimizer, state_dict)
            return
        restore_optimizer_state(optimizer, groups, state_dict)

    def _groups_of(self, optimizer: Optimizer) -> list[list[nn.Parameter]] | None:
        """The model parameters of each group of the engine's optimizer when their state lives
        in DeepSpeed's partitions; None for a plain torch optimizer, which is saved as it is."""
        engine = self._engine
        if engine is None or optimizer is not engine.optimizer or self._optimizer_groups is None:
            return None
        trainable = [p for group in self._optimizer_groups for p in group if p.requires_grad]
        if all(has_master(p) for p in trainable):
            return self._optimizer_groups
        own = {id(p) for group in optimizer.param_groups for p in group["params"]}
        if all(id(p) in own for p in trainable):
            return None  # ZeRO stage 0 in float32: the torch optimizer holds the model's parameters
        raise MisconfigurationError(
            f"the state of DeepSpeed's {type(optimizer).__name__} (ZeRO stage 0 with 16-bit precision) "
            "cannot be gathered into a checkpoint; use ZeRO stage 1, 2 or 3"
        )

    # -- sharded checkpoints ---------------------------------------------------------------

    @property
    def saves_sharded(self) -> bool:
        if self.state_dict_type not in ("full", "sharded"):
            raise MisconfigurationError(
                f"state_dict_type={self.state_dict_type!r} is not allowed; use 'full' or 'sharded'"
            )
        return self.state_dict_type == "sharded"

    @property
    def reads_sharded_checkpoints(self) -> bool:
        return True

    def _engine_entries(self, state: Mapping[str, Any]) -> tuple[list[str], bool]:
        """The keys of ``state`` that the engine saves and loads itself (its module and
        optimizer), and whether the optimizer is among them."""
        engine = self._require_engine("save or load a sharded checkpoint")
        keys: list[str] = []
        with_optimizer = False
        for key, value in state.items():
            if isinstance(value, nn.Module):
                if not self._owns(value):
                    raise MisconfigurationError(
                        f"checkpoint entry {key!r}: a sharded DeepSpeed checkpoint holds only the "
                        "engine's module; use state_dict_type='full' for other modules"
                    )
                keys.append(key)
            elif value is engine.optimizer and value is not None:
                keys.append(key)
                with_optimizer = True
        return keys, with_optimizer

    def save_sharded_checkpoint(self, checkpoint: Mapping[str, Any], filepath: PathLike) -> None:
        from stratcore.checkpoints.sharded import engine_record

        engine = self._engine
        keys, _ = self._engine_entries(checkpoint)
        meta: dict[str, Any] = {}
        for key, value in checkpoint.items():
            if key in keys:
                continue
            meta[key] = value.state_dict() if is_stateful(value) else value
        modules = [k for k in keys if isinstance(checkpoint[k], nn.Module)]
        self.sharded_saver.save_with(
            lambda folder: engine.save_checkpoint(str(folder), tag=TAG),
            engine_record(self.wrapper, keys, meta, module=modules[0] if modules else None),
            filepath,
        )

    def load_sharded_checkpoint(
        self,
        filepath: PathLike,
        state: nn.Module | Optimizer | MutableMapping[str, Any] | None,
        strict: bool,
    ) -> dict[str, Any]:
        from stratcore.checkpoints.sharded import read_meta

        record = read_meta(filepath)
        if record.get("engine") != self.wrapper or not isinstance(state, MutableMapping):
            return super().load_sharded_checkpoint(filepath, state, strict)
        check_entries(filepath, record, state, strict)
        keys, with_optimizer = self._engine_entries(state)
        if keys:
            with weights_only_engine_loads(self._engine):
                load_path, _ = self._engine.load_checkpoint(
                    str(filepath),
                    tag=TAG,
                    load_module_strict=strict,
                    load_optimizer_states=with_optimizer,
                    load_lr_scheduler_states=False,
                )
            if load_path is None:
                raise FileNotFoundError(f"DeepSpeed found no checkpoint in {os.fspath(filepath)}")
        return restore_entries(record["entries"], state)

    @classmethod
    def consolidated_checkpoint(cls, source: Path, record: dict[str, Any]) -> dict[str, Any]:
        """A folder this strategy saved sharded, as one checkpoint: the module's full float32
        weights (DeepSpeed's ``zero_to_fp32``) and the other entries; DeepSpeed's optimizer
        partitions are not converted (``stratcore.checkpoints.sharded.consolidated``). Every
        file of the folder is read weights-only first (``checkpoint_files.check_folder``)."""
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        checkpoint = dict(record["entries"])
        if record.get("module") is not None:
            check_folder(source)  # zero_to_fp32 reads the files as trusted
            weights = get_fp32_state_dict_from_zero_checkpoint(str(source), tag=TAG)
            checkpoint[record["module"]] = dict(weights)
        return checkpoint

    # -- teardown --------------------------------------------------------------------------

    def teardown(self) -> None:
        engine, self._engine = self._engine, None
        self._optimizer_groups = None
        if engine is not None:
            engine.destroy()
            process_groups.forget_models(engine.module)  # else they live as long as the process
            # The engine's optimizer wraps the user's and holds the engine's process groups.
            self._optimizers = [getattr(opt, "optimizer", opt) for opt in self._optimizers]
        super().teardown()
        if self._saved_local_rank is not None:
            (previous,) = self._saved_local_rank
            if previous is None:
                os.environ.pop("LOCAL_RANK", None)
            else:
                os.environ["LOCAL_RANK"] = previous
            self._saved_local_rank = None
