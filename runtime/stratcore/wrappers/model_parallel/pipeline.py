"""Pipeline parallelism for 'model_parallel', through ``torch.distributed.pipelining``.

The model is cut into stages, held by the processes of each pipeline group in turn (stage
``s`` on pipeline rank ``s % pp``: one stage per process for 'GPipe' and '1F1B', several for
'Interleaved1F1B'). A training step splits the batch into microbatches and runs the
schedule: forward passes flow from stage to stage by send and receive, the last stage
computes the loss of each microbatch, and the backward passes flow back; gradients are those
of the mean loss over the microbatches.

Stages come from the user's ``pipeline_fn(module, stage_index, num_stages)``, or from
``pipeline_split``: the names of the modules where a stage begins, in the order the model
runs them. The modules ``pipeline_split`` can name are the model's children, with the
entries of ``ModuleList``, ``ModuleDict`` and ``Sequential`` children (or of the model
itself, if it is one of those) listed one by one: ``["layers.2"]`` cuts ``embed, layers.0,
layers.1 | layers.2, layers.3, norm, head``. Each stage is then a copy of the model that
shares the stage's modules and lacks the others: an entry of another stage is removed from
its container (the others keep their names, and iterating the container skips it), any
other module of another stage becomes None. The model's forward must therefore skip what
is absent, as torchtitan's models do (``if self.embed is not None: ...``, ``for layer in
self.layers: ...``). Parameters keep the model's names, so checkpoints of the pipelined
model hold the model's own state dict, every stage's part of it.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from stratcore.exceptions import MisconfigurationError
from torch import nn

if TYPE_CHECKING:
    from stratcore.precision.base import PrecisionBase

#: Schedule option -> torch's class in ``torch.distributed.pipelining``.
SCHEDULES = {
    "GPipe": "ScheduleGPipe",
    "1F1B": "Schedule1F1B",
    "Interleaved1F1B": "ScheduleInterleaved1F1B",
}
#: Schedules that run several stages in each process.
MULTI_STAGE = frozenset({"Interleaved1F1B"})
_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)


@dataclass(frozen=True)
class Unit:
    """A module ``pipeline_split`` can place: its name, the module holding it and its key."""

    name: str
    module: nn.Module
    parent: str
    key: str


def pipeline_units(model: nn.Module) -> list[Unit]:
    """The modules of ``model`` a stage is made of, in the order the model runs them."""
    if isinstance(model, _CONTAINERS):
        return [Unit(k, m, "", k) for k, m in model.named_children()]
    units: list[Unit] = []
    for name, child in model.named_children():
        if isinstance(child, _CONTAINERS):
            units += [Unit(f"{name}.{k}", m, name, k) for k, m in child.named_children()]
        else:
            units.append(Unit(name, child, "", name))
    return units


def split_units(model: nn.Module, split: Sequence[str]) -> list[list[Unit]]:
    """The units of each stage, cut before every name of ``split``."""
    if isinstance(split, str) or not all(isinstance(s, str) for s in split) or not split:
        raise MisconfigurationError(
            f"pipeline_split={split!r} is not allowed; give the names of the modules where a "
            "stage begins, such as ['layers.2']"
        )
    own = [name for name, p in model.named_parameters(recurse=False)]
    if own:
        raise MisconfigurationError(
            f"pipeline_split cannot place the parameter {own[0]!r}, which the model holds "
            "itself; move it into a submodule or give a pipeline_fn"
        )
    units = pipeline_units(model)
    names = [u.name for u in units]
    cuts = []
    for name in split:
        if name not in names:
            raise MisconfigurationError(
                f"pipeline_split names {name!r}, which is not a module the pipeline can place; "
                f"use one of {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}"
            )
        cuts.append(names.index(name))
    if cuts != sorted(set(cuts)) or cuts[0] == 0:
        raise MisconfigurationError(
            f"pipeline_split={list(split)!r} must name modules after the first, in the order "
            f"the model runs them ({', '.join(names[:12])}{', ...' if len(names) > 12 else ''})"
        )
    bounds = [0, *cuts, len(units)]
    return [units[a:b] for a, b in itertools.pairwise(bounds)]


def stage_module(model: nn.Module, units: Sequence[Unit], keep: Sequence[Unit]) -> nn.Module:
    """A copy of ``model`` that shares the modules of ``keep`` and its buffers, and lacks the
    other ``units`` (see the module documentation)."""
    memo: dict[int, Any] = {id(u.module): u.module for u in units}
    memo.update({id(b): b for b in model.buffers(recurse=False)})
    clone = copy.deepcopy(model, memo)
    kept = {u.name for u in keep}
    for unit in units:
        if unit.name in kept:
            continue
        holder = clone.get_submodule(unit.parent) if unit.parent else clone
        if isinstance(holder, _CONTAINERS):
            del holder._modules[unit.key]
        else:
            holder._modules[unit.key] = None
    return clone


def merged_children(modules: Sequence[nn.Module]) -> dict[str, nn.Module | None]:
    """The children of one or more stage modules, as one set of names: containers that
    several stages hold part of are merged into one copy holding every part."""
    children: dict[str, nn.Module | None] = {}
    for module in modules:
        for name, child in module._modules.items():
            present = children.get(name)
            if present is None or present is child:
                children[name] = child
            elif child is None:
                continue
            elif isinstance(present, _CONTAINERS) and type(child) is type(present):
                merged = copy.copy(present)  # stages are merged in order: so are their parts
                merged._modules = {**present._modules, **child._modules}
                children[name] = merged
            else:
                raise MisconfigurationError(
                    f"two pipeline stages of this process both hold {name!r}; each module "
                    "belongs to one stage"
                )
    return children


def local_stages(pp_rank: int, pp_size: int, num_stages: int) -> list[int]:
    """The stages a pipeline rank holds (loop placement: stage s on rank s % pp)."""
    return list(range(pp_rank, num_stages, pp_size))


class PipelineModel(nn.Module):
    """This process's stages of a pipelined model, under the model's own names: its
    ``state_dict``, ``parameters`` and checkpoints hold what this process holds. Calling it
    runs the forward passes of the pipeline (every process of the pipeline group calls it
    with the whole batch) and returns the model's output on the process holding the last
    stage, None on the others; training goes through ``strategy.forward_backward``."""

    def __init__(self, pipeline: Pipeline, children: Mapping[str, nn.Module | None]) -> None:
        super().__init__()
        for name, child in children.items():
            self._modules[name] = child
        self._pipeline = pipeline

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._pipeline.evaluate(args, kwargs)


class Pipeline:
    """This process's stages and the schedule that runs them."""

    def __init__(
        self,
        stages: list[Any],
        schedule_name: str,
        microbatches: int,
        group: Any,
        precision: PrecisionBase,
    ) -> None:
        import torch.distributed.pipelining as pipelining

        self.stages = stages
        self.group = group
        self.microbatches = microbatches
        self.first = any(stage.is_first for stage in stages)
        self.last = any(stage.is_last for stage in stages)
        self._precision = precision
        self._loss_fn: Callable[..., torch.Tensor] | None = None
        self._losses: list[torch.Tensor] = []
        #: The whole model's state-dict keys, in its order (full state dicts follow it).
        self.key_order: list[str] = []
        self._pending: torch.Tensor | None = None
        schedule_class = getattr(pipelining, SCHEDULES[schedule_name])
        argument = stages if schedule_name in MULTI_STAGE else stages[0]
        self.schedule = schedule_class(argument, n_microbatches=microbatches, loss_fn=self._loss)

    def _loss(self, output: Any, target: Any) -> torch.Tensor:
        """The schedule's loss function: the step's own, recorded before the precision plugin
        scales it for backward."""
        assert self._loss_fn is not None
        loss = self._loss_fn(output, target)
        self._losses.append(loss.detach())
        return self._precision.pre_backward(loss)

    def _check_batch(self, args: Sequence[Any]) -> None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if tensors and tensors[0].shape[0] % self.microbatches:
            raise MisconfigurationError(
                f"a batch of {tensors[0].shape[0]} does not split into {self.microbatches} "
                "equal microbatches; make the batch size a multiple of microbatches"
            )

    def step(
        self, args: Sequence[Any], target: Any, loss_fn: Callable[..., torch.Tensor]
    ) -> torch.Tensor:
        """Forward and backward of one batch; the mean loss over its microbatches, on every
        process of the pipeline group."""
        self._check_batch(args)
        self._loss_fn, self._losses = loss_fn, []
        inputs = self._inputs(tuple(args))
        with self._forward_context():
            self.schedule.step(*inputs, target=target if self.last else None)
        device = self.stages[0].device
        if self.last:
            # The schedule's first step may also run the loss while it infers shapes: the
            # step's own losses are the last ones, one per microbatch.
            loss = torch.stack(self._losses[-self.microbatches :]).mean().to(device)
        else:
            loss = torch.zeros((), device=device)
        self._loss_fn, self._losses = None, []
        return self._shared(loss)

    def _shared(self, loss: torch.Tensor) -> torch.Tensor:
        """The last stage's ``loss`` on every process of the pipeline group. The sum runs in
        the background (a functional collective): the tensor waits for it when it is first
        read, so that a step whose loss nobody reads costs no wait."""
        import torch.distributed._functional_collectives as funcol

        self.settle()
        # By the group's name: resolving the group object costs as much as the sum itself.
        self._pending = funcol.all_reduce(loss, "sum", group=self.group.group_name)
        return self._pending

    def settle(self) -> None:
        """Wait for the sum of the last loss, if it is still running."""
        pending, self._pending = self._pending, None
        wait = getattr(pending, "wait", None)
        if callable(wait):
            wait()

    def evaluate(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Forward passes only; the output on the process holding the last stage."""
        self._check_batch(args)
        inputs = self._inputs(args)
        keywords = self._inputs(kwargs) if self.first else {}
        # Without a target there is no loss to compute: the schedule skips it only when it
        # has no loss function.
        schedule, loss = self.schedule, self.schedule._loss_fn
        schedule._loss_fn = None
        try:
            with torch.no_grad(), self._forward_context():
                output = schedule.eval(*inputs, **keywords)
        finally:
            schedule._loss_fn = loss
        if not self.last:
            return None
        return self._precision.convert_output(output) if self._precision.wraps_forward else output

    def _inputs(self, data: Any) -> Any:
        """The inputs as the first stage takes them (converted by precision plugins that
        wrap forward passes); the other stages receive theirs from the stage before."""
        if not self.first:
            return ()
        return self._precision.convert_input(data) if self._precision.wraps_forward else data

    def _forward_context(self) -> Any:
        plugin = self._precision
        return plugin.forward_context() if plugin.wraps_forward else contextlib.nullcontext()


def build_stage(
    submodule: nn.Module, index: int, num_stages: int, device: torch.device, group: Any
) -> Any:
    """torch's PipelineStage of stage ``index`` of ``num_stages``, on ``device``, over the
    pipeline group."""
    from torch.distributed.pipelining import PipelineStage

    return PipelineStage(submodule, index, num_stages, device, group=group)


# -- building the pipeline -------------------------------------------------------------------


def stage_count(split: Sequence[str] | None, schedule: str, pp_size: int) -> int:
    """How many stages the pipeline has: one more than the cuts of ``pipeline_split``, else
    one per pipeline rank (two for interleaved schedules)."""
    if schedule not in SCHEDULES:
        raise MisconfigurationError(
            f"pipeline_schedule={schedule!r} is not allowed; use one of {', '.join(SCHEDULES)}"
        )
    count = len(split) + 1 if split is not None else pp_size * (2 if schedule in MULTI_STAGE else 1)
    if schedule not in MULTI_STAGE and count != pp_size:
        raise MisconfigurationError(
            f"pipeline_schedule={schedule!r} runs one stage per process, but pipeline_split "
            f"makes {count} stages for pp={pp_size}; cut the model into {pp_size} stages, or "
            "use 'Interleaved1F1B'"
        )
    if schedule in MULTI_STAGE and count % pp_size:
        raise MisconfigurationError(
            f"pipeline_schedule={schedule!r} places stages on the {pp_size} pipeline ranks in "
            f"turn; {count} stages do not divide among them"
        )
    return count


def _check_unshared(stages: Sequence[Sequence[Unit]]) -> None:
    """Stages may not share parameters (tied weights would need their own communication)."""
    owner: dict[int, tuple[int, str]] = {}
    for index, units in enumerate(stages):
        for unit in units:
            for name, parameter in unit.module.named_parameters(prefix=unit.name):
                first = owner.setdefault(id(parameter), (index, name))
                if first[0] != index:
                    raise MisconfigurationError(
                        f"{first[1]!r} (stage {first[0]}) and {name!r} (stage {index}) are one "
                        "parameter; pipeline stages cannot share parameters: cut the model so "
                        "that both uses fall in one stage"
                    )


def build_pipeline(
    model: nn.Module,
    options: Mapping[str, Any],
    parallelize: Callable[[nn.Module], nn.Module],
    *,
    pp_rank: int,
    pp_size: int,
    device: torch.device,
    group: Any,
    precision: PrecisionBase,
) -> tuple[PipelineModel, set[str]]:
    """This process's stages of ``model``, each laid out by ``parallelize``, under a
    ``PipelineModel``; and the names of the model's parameters they hold. ``options`` are the
    strategy's: ``pipeline_split``, ``pipeline_fn``, ``pipeline_schedule``, ``microbatches``."""
    split, schedule = options["pipeline_split"], options["pipeline_schedule"]
    count = stage_count(split, schedule, pp_size)
    indices = local_stages(pp_rank, pp_size, count)
    if split is not None:
        stages = split_units(model, split)
        _check_unshared(stages)
        units = [unit for stage in stages for unit in stage]
        modules = [stage_module(model, units, stages[i]) for i in indices]
    else:
        modules = [options["pipeline_fn"](model, i, count) for i in indices]
        for module in modules:
            if not isinstance(module, nn.Module):
                raise MisconfigurationError(
                    f"pipeline_fn must return the stage's module, not {type(module).__name__}"
                )
    held = {name for module in modules for name, _ in module.named_parameters()}
    modules = [parallelize(module) for module in modules]
    built = [build_stage(m, i, count, device, group) for m, i in zip(modules, indices, strict=True)]
    try:
        pipeline = Pipeline(built, schedule, options["microbatches"] or count, group, precision)
    except ValueError as error:  # torch's own rules on microbatches
        raise MisconfigurationError(f"pipeline_schedule={schedule!r}: {error}") from None
    pipeline.key_order = list(model.state_dict())
    return PipelineModel(pipeline, merged_children(modules)), held
