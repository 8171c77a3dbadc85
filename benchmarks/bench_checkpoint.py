"""Checkpoint throughput of a stratlib strategy against plain torch.save/torch.load.

There is no target: a durable, atomic save must wait for the disk (``fsync``), which plain
``torch.save`` does not. The details show ``torch.save`` + ``fsync`` too, to tell the price of
durability from any overhead of the strategy.
"""

from __future__ import annotations

from .common import Row, Section, Settings, median, run_worker, seconds, spread


def _throughput(size: int, times: list[float]) -> list[float]:
    return [size / 1e6 / t for t in times]


def checkpoints(settings: Settings) -> Section:
    megabytes = settings.pick(16, 200)
    # A multiple of 4: every save runs in every position of the rotation equally often.
    repeats = settings.pick(1, 8)
    result = run_worker(
        "benchmarks.workers.checkpoint", ["--megabytes", str(megabytes), "--repeats", str(repeats)]
    )
    times: dict[str, list[float]] = result["times"]
    size = result["bytes"]["stratlib"]
    plain_size = result["bytes"]["plain"]
    section = Section("checkpoint")
    mb = size / 1e6

    def row(name: str, ours: str, theirs: str, theirs_label: str) -> Row:
        ours_rate = _throughput(size, times[ours])
        theirs_rate = _throughput(plain_size, times[theirs])
        ratios = [a / b for a, b in zip(ours_rate, theirs_rate, strict=True)]
        return Row(
            name=name,
            measured=f"{median(ours_rate):.0f} MB/s",
            baseline=f"{median(theirs_rate):.0f} MB/s {theirs_label}",
            ratio=median(ratios),
            spread=spread(ratios),
            target="- (higher is better)",
            met=None,
            notes=f"{seconds(median(times[ours]))} vs {seconds(median(times[theirs]))}",
        )

    section.rows.append(
        row("checkpoint save (atomic)", "stratlib_save", "torch_save", "torch.save")
    )
    section.rows.append(row("checkpoint load", "stratlib_load", "torch_load", "torch.load"))
    returned = times["async_save"]
    synchronous = times["stratlib_save"]
    ratios = [a / b for a, b in zip(returned, synchronous, strict=True)]
    section.rows.append(
        Row(
            name="async checkpoint save, time to return",
            measured=seconds(median(returned)),
            baseline=f"{seconds(median(synchronous))} synchronous save",
            ratio=median(ratios),
            spread=spread(ratios),
            target="-",
            met=None,
            notes=f"file complete after {seconds(median(times['async_complete']))}",
        )
    )
    fsync_rate = median(_throughput(plain_size, times["torch_save_fsync"]))
    section.details.append(
        f"Checkpoints: {mb:.0f} MB of float32 tensors (model state dict, SGD state, a step "
        f"number), {repeats} repeat(s) in one process (saves in rotating order, loads A B B A), on "
        f"{result['filesystem']}; MB = 10^6 bytes; ratio = stratlib throughput / plain "
        f"throughput (above 1 is faster). The strategy is `single_device` on cpu; its save "
        "writes a temporary file, fsyncs it, renames it over the target and fsyncs the "
        f"folder. Plain torch.save followed by fsync: {fsync_rate:.0f} MB/s. Loads read "
        "files the saves just wrote (page cache warm for both); both use weights_only=True."
    )
    return section
