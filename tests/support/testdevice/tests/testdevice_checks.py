"""The one-process checks of the test device, each run in a fresh process by test_testdevice.py.

A process loads the device itself: PrivateUse1 takes one name per process, and the pytest process
stays as it was. Usage: ``python testdevice_checks.py CHECK``. Each check prints
``progress: ...`` as it goes (the tests watch for progress) and ``ok: CHECK`` at the end.
testdevice_ranks.py holds the two-process checks.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable

import stratgen_testdevice
import torch
import torch.nn.functional as F
from torch import nn

NAME = "testdev"


def progress(message: str) -> None:
    print(f"progress: {message}", flush=True)


def expect_error(kind: type[BaseException], action: Callable[[], object]) -> None:
    try:
        action()
    except kind:
        return
    raise AssertionError(f"expected {kind.__name__}")


def close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5) -> bool:
    return a.shape == b.shape and torch.allclose(a.detach().cpu(), b.detach().cpu(), atol=atol)


# ---- One process


def check_tensors_and_memory() -> None:
    stratgen_testdevice.load()
    mod = stratgen_testdevice.module()
    before = [stratgen_testdevice.memory_allocated(i) for i in (0, 1)]
    x = torch.ones(256, device="testdev:0")  # 1024 bytes
    y = torch.zeros(64, dtype=torch.float64, device="testdev:1")  # 512 bytes
    assert x.device == torch.device(NAME, 0) and x.device.type == NAME and x.device.index == 0
    assert y.device.index == 1 and getattr(y, f"is_{NAME}") and not x.is_cpu
    assert stratgen_testdevice.memory_allocated(0) == before[0] + 1024
    assert stratgen_testdevice.memory_allocated(1) == before[1] + 512
    assert mod.memory_allocated(1) == torch.accelerator.memory_allocated(1) == before[1] + 512
    progress("the byte counter rises")
    del x
    assert stratgen_testdevice.memory_allocated(0) == before[0]
    assert mod.max_memory_allocated(0) >= before[0] + 1024
    mod.reset_peak_memory_stats(0)
    assert mod.max_memory_allocated(0) == before[0]
    progress("and falls")
    z = torch.empty(8, device="testdev:1")  # 32 bytes
    held = mod.memory_allocated(1)
    z.untyped_storage().resize_(0)  # what FSDP does to free unsharded parameters
    assert mod.memory_allocated(1) == held - 32 and z.untyped_storage().device.index == 1
    z.untyped_storage().resize_(32)
    assert mod.memory_allocated(1) == held
    assert getattr(torch.arange(3), NAME)(1).device == torch.device(NAME, 1)  # generated method


def check_copies() -> None:
    stratgen_testdevice.load()
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    on0 = cpu.to("testdev:0")
    on1 = on0.to("testdev:1")
    assert on0.device.index == 0 and on1.device.index == 1
    assert torch.equal(on1.cpu(), cpu) and torch.equal(on1.to("testdev:0").cpu(), cpu)
    progress("cpu -> 0 -> 1 -> 0 -> cpu")
    transposed = on1.t()
    assert not transposed.is_contiguous() and torch.equal(transposed.cpu(), cpu.t())
    dst = torch.empty(4, 3, device="testdev:0")
    dst.copy_(transposed)  # across devices, from a strided source
    assert torch.equal(dst.cpu(), cpu.t())
    half = on0.to(torch.float16)
    assert half.dtype == torch.float16 and torch.equal(half.cpu(), cpu.half())
    progress("strided, cross-device and converting copies")
    view = on0.view(12)
    view[0] = 100.0
    assert on0[0, 0].item() == 100.0 and view.untyped_storage().data_ptr() == on0.data_ptr()
    assert torch.equal(on0[1:, ::2].cpu(), torch.tensor([[4.0, 6.0], [8.0, 10.0]]))
    progress("views share the memory")


def check_guard_streams_events() -> None:
    stratgen_testdevice.load()
    mod = stratgen_testdevice.module()
    assert mod.current_device() == 0 == torch.accelerator.current_device_index()
    with mod.device(1):
        assert mod.current_device() == 1
        assert torch.empty(2, device=NAME).device.index == 1
    assert mod.current_device() == 0 and torch.empty(2, device=NAME).device.index == 0
    torch.accelerator.set_device_index(1)
    assert mod.current_device() == 1 and torch.ones(1, device=NAME).device.index == 1
    mod.set_device(0)
    assert (torch.ones(3, device="testdev:1") * 2).device.index == 1  # follows its input
    expect_error(RuntimeError, lambda: torch.empty(1, device="testdev:7"))
    progress("the guard switches devices")
    stream = mod.Stream()
    assert isinstance(stream, torch.Stream) and stream.device_index == 0
    assert stream != mod.default_stream() and mod.current_stream() == mod.default_stream()
    start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
    with mod.stream(stream):
        assert mod.current_stream() == stream
        start.record()
        torch.ones(16, device=NAME).sum()
        end.record()
    assert mod.current_stream() == mod.default_stream()
    mod.current_stream().wait_event(end)
    mod.current_stream().wait_stream(stream)
    stream.synchronize()
    mod.synchronize()
    assert start.query() and end.query() and stream.query()
    assert start.elapsed_time(end) >= 0.0
    progress("streams and events")


def check_random() -> None:
    stratgen_testdevice.load()
    mod = stratgen_testdevice.module()

    def draw(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)  # seeds the CPU and, through torch.testdev, every device
        normal = torch.randn(16, device="testdev:1")
        dropped = F.dropout(torch.ones(64, device="testdev:1"), 0.5)
        uniform = torch.rand(8, device="testdev:0")
        return torch.cat([normal.cpu(), dropped.cpu(), uniform.cpu()])

    assert torch.equal(draw(1), draw(1)) and not torch.equal(draw(1), draw(2))
    progress("reproducible per seed, different between seeds")
    mod.manual_seed_all(3)
    first = torch.rand(8, device="testdev:0").cpu()
    mod.manual_seed_all(3)
    torch.rand(100)  # the CPU generator is not the device's
    torch.rand(100, device="testdev:1")  # nor is device 1's
    assert torch.equal(torch.rand(8, device="testdev:0").cpu(), first)
    progress("a generator per device")
    state = mod.get_rng_state(1)
    again = torch.randn(4, device="testdev:1").cpu()
    mod.set_rng_state(state, 1)
    assert torch.equal(torch.randn(4, device="testdev:1").cpu(), again)
    generator = torch.Generator(device="testdev:1")
    assert generator.device == torch.device(NAME, 1)
    generator.manual_seed(9)
    mine = torch.randn(4, device="testdev:1", generator=generator).cpu()
    generator.manual_seed(9)
    assert torch.equal(torch.randn(4, device="testdev:1", generator=generator).cpu(), mine)
    mod.manual_seed(11)
    assert mod.initial_seed() == 11
    progress("states and generators")


def check_autocast() -> None:
    stratgen_testdevice.load()
    assert torch.amp.is_autocast_available(NAME)
    dev = torch.device(NAME, 0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    model.to(dev)
    x = torch.randn(2, 3, 8, 8, device=dev)
    target = torch.tensor([1, 3], device=dev)
    reference = F.cross_entropy(model(x), target)
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast(NAME, dtype=dtype):
            assert torch.get_autocast_dtype(NAME) == dtype
            assert model[0](x).dtype == dtype  # convolution
            logits = model(x)
            assert logits.dtype == dtype  # linear
            assert (x.flatten(1) @ torch.randn(192, 2, device=dev)).dtype == dtype  # matmul
            assert logits.softmax(-1).dtype == torch.float32
            assert logits.sum().dtype == logits.norm().dtype == torch.float32
            assert torch.addcmul(reference, logits, logits).dtype == torch.float32  # widest
            loss = F.cross_entropy(logits, target)
            assert loss.dtype == torch.float32
        assert model(x).dtype == torch.float32  # outside the region
        assert close(loss, reference, atol=0.05)
        loss.backward()
        assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
        model.zero_grad()
        progress(f"autocast {dtype}")


def check_grad_scaler() -> None:
    stratgen_testdevice.load()
    dev = torch.device(NAME, 1)
    torch.manual_seed(0)
    cpu_model = nn.Linear(4, 2)
    model = copy.deepcopy(cpu_model).to(dev)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    scaler = torch.amp.GradScaler(NAME, init_scale=2.0**10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    scaler.scale(F.mse_loss(model(x.to(dev)), y.to(dev))).backward()
    scaler.step(opt)
    scaler.update()
    F.mse_loss(cpu_model(x), y).backward()
    cpu_opt.step()
    assert close(model.weight, cpu_model.weight) and scaler.get_scale() == 2.0**10
    progress("a scaled step is the unscaled step")
    opt.zero_grad()
    with torch.autocast(NAME, dtype=torch.float16):
        loss = F.mse_loss(model(x.to(dev)), y.to(dev))
    scaler.scale(loss).backward()
    before = model.weight.detach().cpu().clone()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(model.weight.detach().cpu(), before)
    progress("a step under fp16 autocast")
    opt.zero_grad()
    scaler.scale(model(x.to(dev)).sum() * float("inf")).backward()
    before = model.weight.detach().cpu().clone()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(model.weight.detach().cpu(), before) and scaler.get_scale() == 2.0**9
    progress("an inf gradient skips the step and backs the scale off")


def check_accelerator() -> None:
    count = int(os.environ.get(stratgen_testdevice.COUNT_ENV, "2"))
    stratgen_testdevice.load()
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device(NAME)
    mod = stratgen_testdevice.module()
    assert torch.accelerator.device_count() == count == mod.device_count()
    assert torch.get_device_module(NAME) is mod and getattr(torch, NAME) is mod
    assert torch.ones(1, device=f"testdev:{count - 1}").device.index == count - 1
    expect_error(RuntimeError, lambda: torch.ones(1, device=f"testdev:{count}"))
    progress(f"{count} devices")
    stratgen_testdevice.load()  # again: nothing to do
    expect_error(RuntimeError, lambda: stratgen_testdevice.load(name="otherdev"))
    expect_error(RuntimeError, lambda: stratgen_testdevice.load(count=count + 1))
    progress("load is idempotent and refuses a second name")


def check_parameters() -> None:
    keep = os.environ.get(stratgen_testdevice.KEEP_PARAMETERS_ENV, "1") != "0"
    stratgen_testdevice.load()
    assert stratgen_testdevice.keeps_parameters() is keep
    for expected in (keep, not keep):
        stratgen_testdevice.keeps_parameters(expected)
        linear = nn.Linear(2, 2)
        weight, bias = linear.weight, linear.bias
        linear.to("testdev:1")
        assert isinstance(linear.weight, nn.Parameter) and linear.weight.device.index == 1
        if expected:  # as vendor extensions: the same objects, now on the device
            assert linear.weight is weight and linear.bias is bias and weight.device.type == NAME
        else:  # as torch_xla: new objects; the old ones stay on the CPU
            assert linear.weight is not weight and linear.bias is not bias
            assert weight.device.type == "cpu"
        linear(torch.ones(3, 2, device="testdev:1")).sum().backward()
        assert linear.weight.grad is not None and linear.weight.grad.device.index == 1
        progress(f"keeps parameters: {expected}")


def check_training() -> None:
    stratgen_testdevice.load()
    dev = torch.device(NAME, 1)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(10, 8)
            self.conv = nn.Conv1d(8, 8, 3, padding=1)
            self.norm = nn.LayerNorm(8)
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(32, 16), nn.GELU(), nn.Linear(16, 3))

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            hidden = self.conv(self.embed(tokens).transpose(1, 2)).transpose(1, 2)
            return self.head(F.dropout(self.norm(hidden), 0.0, self.training))

    torch.manual_seed(0)
    tokens, labels = torch.randint(0, 10, (6, 4)), torch.randint(0, 3, (6,))
    for make_optimizer in (
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),  # foreach on this device
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
        lambda p: torch.optim.Adam(p, lr=0.01),
        lambda p: torch.optim.AdamW(p, lr=0.01, foreach=False),
    ):
        cpu_model = Net()
        model = copy.deepcopy(cpu_model).to(dev)
        runs: list[tuple[nn.Module, torch.optim.Optimizer, torch.device | str]] = [
            (cpu_model, make_optimizer(cpu_model.parameters()), "cpu"),
            (model, make_optimizer(model.parameters()), dev),
        ]
        for _ in range(3):
            for net, optimizer, where in runs:
                optimizer.zero_grad()
                F.cross_entropy(net(tokens.to(where)), labels.to(where)).backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimizer.step()
        for (key, expected), actual in zip(
            cpu_model.state_dict().items(), model.state_dict().values(), strict=True
        ):
            assert actual.device == dev and close(actual, expected), key
        progress(f"{type(runs[0][1]).__name__} matches the CPU")


def main(argv: list[str]) -> None:
    globals()[f"check_{argv[0]}"]()
    print(f"ok: {argv[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
