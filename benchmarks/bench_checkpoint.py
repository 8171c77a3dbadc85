"""Checkpoint throughput of a stratlib strategy against plain torch.save/torch.load.

The atomic save is held to ``torch.save`` followed by ``fsync`` of the file, measured in the same
process: a durable save must wait for the disk, so that is the least it can cost. Target: at
least 0.9 of that throughput (the temporary file, the rename and the fsync of the folder may
cost 10%). The ratio against a bare ``torch.save``, which returns before the data is on disk,
is shown in the notes.
"""

from __future__ import annotations

from .common import Row, Section, Settings, median, run_worker, seconds, spread

#: Throughput of the atomic save, at least this fraction of torch.save + fsync.
SAVE_TARGET = 0.9


def _throughput(size: int, times: list[float]) -> list[float]:
    return [size / 1e6 / t for t in times]


def checkpoints(settings: Settings) -> Section:
    megabytes = settings.pick(16, 200)
    # A multiple of 4: every save runs in every position of the rotation equally often.
    repeats = settings.pick(1, 8)
    result = run_worker(
        "benchmarks.workers.checkpoint",
        ["--megabytes", str(megabytes), "--repeats", str(repeats)],
    )
    times: dict[str, list[float]] = result["times"]
    size = result["bytes"]["stratlib"]
    plain_size = result["bytes"]["plain"]
    section = Section("checkpoint")
    mb = size / 1e6

    def ratios(ours: str, theirs: str) -> list[float]:
        ours_rate = _throughput(size, times[ours])
        theirs_rate = _throughput(plain_size, times[theirs])
        return [a / b for a, b in zip(ours_rate, theirs_rate, strict=True)]

    def rate(name: str, bytes_written: int) -> str:
        return f"{median(_throughput(bytes_written, times[name])):.0f} MB/s"

    save = ratios("stratlib_save", "torch_save_fsync")
    unsynced = ratios("stratlib_save", "torch_save")
    section.rows.append(
        Row(
            name="checkpoint save (atomic)",
            measured=rate("stratlib_save", size),
            baseline=f"{rate('torch_save_fsync', plain_size)} torch.save + fsync",
            ratio=median(save),
            spread=spread(save),
            target=f">= {SAVE_TARGET:g} (higher is better)",
            met=median(save) >= SAVE_TARGET,
            notes=(
                f"{seconds(median(times['stratlib_save']))} vs "
                f"{seconds(median(times['torch_save_fsync']))}; against torch.save without "
                f"fsync ({rate('torch_save', plain_size)}): {median(unsynced):.3f} {spread(unsynced)}"
            ),
        )
    )
    load = ratios("stratlib_load", "torch_load")
    section.rows.append(
        Row(
            name="checkpoint load",
            measured=rate("stratlib_load", size),
            baseline=f"{rate('torch_load', plain_size)} torch.load",
            ratio=median(load),
            spread=spread(load),
            target="- (higher is better)",
            met=None,
            notes=f"{seconds(median(times['stratlib_load']))} vs {seconds(median(times['torch_load']))}",
        )
    )
    returned = times["async_save"]
    synchronous = times["stratlib_save"]
    fractions = [a / b for a, b in zip(returned, synchronous, strict=True)]
    section.rows.append(
        Row(
            name="async checkpoint save, time to return",
            measured=seconds(median(returned)),
            baseline=f"{seconds(median(synchronous))} synchronous save",
            ratio=median(fractions),
            spread=spread(fractions),
            target="-",
            met=None,
            notes=f"file complete after {seconds(median(times['async_complete']))}",
        )
    )
    section.details.append(
        f"Checkpoints: {mb:.0f} MB of float32 tensors (model state dict, SGD state, a step "
        f"number), {repeats} repeat(s) in one process (saves in rotating order, loads A B B A), on "
        f"{result['filesystem']}; MB = 10^6 bytes; ratio = stratlib throughput / plain "
        f"throughput (above 1 is faster). The strategy is `single_device` on cpu; its save "
        "writes a temporary file, fsyncs it, renames it over the target and fsyncs the "
        "folder. The baselines save to a path, which torch writes from C++ (a Python file "
        "object is slower). Loads read files the saves just wrote (page cache warm for both); "
        "both use weights_only=True."
    )
    return section
