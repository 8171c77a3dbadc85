"""The model, data and hand-written loops every check of ``benchmarks.gpu`` compares against.

A small decoder-only transformer (token and position embeddings, pre-norm blocks of causal
self-attention and an MLP, a head) learns a fixed token-to-token mapping, so its loss falls
within a few steps. Attention is written out (matmul, mask, softmax, matmul) rather than
taken from ``scaled_dot_product_attention``: every operation then has a deterministic CUDA
kernel under ``torch.use_deterministic_algorithms``, so that a strategy and the hand-written
loop doing the same arithmetic give the same numbers, and any difference is the strategy's.
"""

from __future__ import annotations

import os

# Deterministic cuBLAS needs its workspace configured before CUDA starts (torch's notes on
# reproducibility). Every worker imports this module before anything starts CUDA.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import contextlib  # noqa: E402
import math  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402


@dataclass(frozen=True)
class Size:
    """How large the model and how long the runs are on one kind of device."""

    vocab: int
    width: int
    heads: int
    layers: int
    seq: int
    batch: int
    #: Steps of the runs that are compared.
    steps: int
    #: Steps before timing, then rounds of timed steps of each side, in turn.
    warmup: int
    rounds: int
    round_steps: int


#: ``full`` is sized for an H100 (about 21 M parameters, 4096 tokens a step: a few milliseconds
#: a step); ``small`` for a busy 2-core CI machine, on the CPU or the project's test device
#: (whose operations run on the host).
SIZES = {
    "full": Size(
        vocab=4096,
        width=512,
        heads=8,
        layers=4,
        seq=256,
        batch=16,
        steps=8,
        warmup=5,
        rounds=5,
        round_steps=10,
    ),
    "small": Size(
        vocab=64,
        width=32,
        heads=2,
        layers=2,
        seq=16,
        batch=4,
        steps=4,
        warmup=1,
        rounds=3,
        round_steps=2,
    ),
}
LEARNING_RATE = 0.05
MOMENTUM = 0.9


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        head = width // self.heads
        qkv = self.qkv(self.norm1(x)).view(batch, seq, 3, self.heads, head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head))
        future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        attended = (weights @ v).transpose(1, 2).reshape(batch, seq, width)
        x = x + self.proj(attended)
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, size: Size) -> None:
        super().__init__()
        self.embed = nn.Embedding(size.vocab, size.width)
        self.position = nn.Parameter(torch.randn(size.seq, size.width) * 0.02)
        self.blocks = nn.ModuleList(Block(size.width, size.heads) for _ in range(size.layers))
        self.norm = nn.LayerNorm(size.width)
        self.head = nn.Linear(size.width, size.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build_model(size: Size, seed: int = 0) -> TinyGPT:
    torch.manual_seed(seed)
    return TinyGPT(size)


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)


def batches(
    size: Size, count: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` batches of random tokens; the target of a token is a fixed function of it."""
    generator = torch.Generator().manual_seed(1234)
    out = []
    for _ in range(count):
        tokens = torch.randint(0, size.vocab, (size.batch, size.seq), generator=generator)
        targets = (tokens * 7 + 3) % size.vocab
        out.append((tokens.to(device), targets.to(device)))
    return out


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross entropy in float32, whatever dtype the logits come in; written out, because
    torch's ``nll_loss`` has no deterministic CUDA kernel (``use_deterministic_algorithms``)."""
    log_probs = logits.float().log_softmax(dim=-1)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).mean()


def loss_of(model: Any, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return cross_entropy(model(tokens), targets)


# -- the hand-written loops: what a user writes with torch alone ------------------------------


class HandLoop:
    """One training step in ``precision`` written with plain torch: autocast for '16-mixed'
    (with a GradScaler where ``scaler``) and 'bf16-mixed', a bfloat16 model for 'bf16-true'."""

    def __init__(
        self, model: nn.Module, precision: str, device: torch.device, scaler: bool = True
    ) -> None:
        self.device = device
        self.precision = precision
        if precision == "bf16-true":
            model = model.to(torch.bfloat16)
        self.model = model.to(device)
        self.optimizer = make_optimizer(self.model)
        scaled = precision == "16-mixed" and scaler
        self.scaler = torch.amp.GradScaler(device.type) if scaled else None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "16-mixed":
            return torch.autocast(self.device.type, dtype=torch.float16)
        if self.precision == "bf16-mixed":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            logits = self.model(tokens)
        loss = cross_entropy(logits, targets)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


def strategy_step(strategy: Any, model: Any, optimizer: Any) -> Callable[..., torch.Tensor]:
    """One training step through ``strategy``, as its users write it."""

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = loss_of(model, tokens, targets)
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        return loss.detach()

    return step


def train(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    data: list[tuple[torch.Tensor, torch.Tensor]],
) -> list[float]:
    return [float(step(tokens, targets)) for tokens, targets in data]


#: What torch warned of inside ``deterministic``: operations without a deterministic kernel.
NONDETERMINISTIC: set[str] = set()


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """Deterministic kernels, as for the compared runs (timing runs use torch's defaults).

    An operation without a deterministic kernel, inside a library under check, warns rather
    than raising: the check then compares within its tolerance, and the warning is recorded
    in ``NONDETERMINISTIC`` for the report. Uninitialized memory is left as it is (torch
    would fill every ``torch.empty`` with NaN: DeepSpeed's gradient buckets, hundreds of
    megabytes, at every backward pass); the checked code never reads it.
    """
    settings = torch.utils.deterministic
    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        settings.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    settings.fill_uninitialized_memory = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
            settings.fill_uninitialized_memory = previous[2]
    for warning in caught:
        message = str(warning.message)
        if "deterministic" in message:
            NONDETERMINISTIC.add(message.splitlines()[0][:300])


def full_parameters(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A copy of a module's state as float32 tensors on the CPU, DTensors gathered (a copy:
    on the CPU, ``.float().cpu()`` of a float32 tensor is the tensor itself, which training
    goes on changing)."""
    out = {}
    for name, value in state.items():
        if hasattr(value, "full_tensor"):
            value = value.full_tensor()
        out[name] = value.detach().float().cpu().clone()
    return out


def hand_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    return full_parameters(dict(model.state_dict()))


def reference_run(
    size: Size, device: torch.device, data: list[tuple[torch.Tensor, torch.Tensor]]
) -> tuple[HandLoop, list[float], dict[str, torch.Tensor]]:
    """The hand-written 32-true loop trained on ``data`` with deterministic kernels: the loop,
    its losses and its parameters, which a check's run through stratlib must match."""
    with deterministic():
        hand = HandLoop(build_model(size), "32-true", device)
        losses = train(hand.step, data)
        return hand, losses, hand_parameters(hand.model)
