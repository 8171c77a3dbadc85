"""Sharded checkpoints of an fsdp model on 2 ranks against full ones, and asynchronous saves
against synchronous ones, measured in the same launch.

Targets: a sharded save is at least as fast as one full save (ratio of times <= 1), and an
asynchronous sharded save returns in at most 10% of the synchronous save's time.
"""

from __future__ import annotations

from .common import Row, Section, Settings, median, run_worker, seconds, spread


def sharded_checkpoints(settings: Settings) -> Section:
    megabytes = settings.pick(64, 1000)
    repeats = settings.pick(1, 3)
    result = run_worker(
        "benchmarks.workers.sharded_checkpoint",
        ["--megabytes", str(megabytes), "--repeats", str(repeats)],
    )
    times: dict[str, list[float]] = result["times"]
    section = Section("sharded checkpoint")

    def row(name: str, ours: str, theirs: str, label: str, target: float) -> Row:
        ratios = [a / b for a, b in zip(times[ours], times[theirs], strict=True)]
        ratio = median(ratios)
        return Row(
            name=name,
            measured=seconds(median(times[ours])),
            baseline=f"{seconds(median(times[theirs]))} {label}",
            ratio=ratio,
            spread=spread(ratios),
            target=f"<= {target:g}",
            met=ratio <= target,
            notes="",
        )

    section.rows.append(row("sharded save, 2 ranks", "sharded", "full", "full save", 1.0))
    section.rows.append(
        row("async sharded save, time to return", "async", "sharded", "sharded save", 0.10)
    )
    section.details.append(
        f"Sharded checkpoints: an fsdp model of {result['full_bytes'] / 1e6:.0f} MB (float32) "
        f"sharded across 2 CPU ranks, {repeats} repeat(s) in one launch, saves in rotating "
        "order. Full save: the state gathered on rank 0, one file written, fsynced and renamed "
        "into place. Sharded save: each rank writes its shards (torch.distributed.checkpoint), "
        "rank 0 the metadata, and the folder is swapped into place. Asynchronous: time until "
        f"save_checkpoint returns; complete after {seconds(median(times['async_complete']))}."
    )
    return section
