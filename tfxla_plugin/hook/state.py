"""The hook's switch and its counters: the only process-wide state of ``tfxla_plugin.hook``.

``Switch`` says whether the callback rewrites graphs and how (``must_compile``: ``enable(jit_compile=True)``),
and remembers TF's remapper setting to restore on ``disable``. ``HookStats`` counts what the hook did
while it was on; ``snapshot()`` copies it for ``tfxla_plugin.stats()``. Both are guarded by ``LOCK``:
Grappler may call the hook from several TF threads at once (each holding the GIL only between
compiler subprocess waits).
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from dataclasses import dataclass, field

LOCK = threading.Lock()


@dataclass
class Switch:
    on: bool = False
    must_compile: bool = False  # enable(jit_compile=True): every graph must compile whole, else an ERROR
    remapping_before: bool | None = None  # TF's "remapping" option before enable() switched it off


@dataclass
class HookStats:
    """What the graph-optimizer hook did in this process while it was enabled."""

    graphs_seen: int = 0  # distinct graphs Grappler handed over (its repeated iterations count once)
    graphs_rewritten: int = 0  # graphs returned with TfxlaLaunch nodes (not those only taken from XLA)
    clusters_compiled: int = 0  # clusters compiled into kernels (a kernel cache hit included)
    kernel_cache_hits: int = 0  # of those, kernels found in the on-disk cache (no compiler run)
    seconds_compiling: float = 0.0  # wall time spent clustering, compiling and rewriting graphs
    xla_calls_taken: int = 0  # calls of jit_compile=True functions sent to the hook instead of XLA
    left_alone: Counter = field(default_factory=Counter)  # why graphs were returned unchanged -> count

    def __str__(self) -> str:
        alone = ", ".join(f"{reason}: {n}" for reason, n in self.left_alone.most_common()) or "none"
        return (f"graphs seen {self.graphs_seen}, rewritten {self.graphs_rewritten}; clusters compiled "
                f"{self.clusters_compiled} ({self.kernel_cache_hits} kernel cache hits), "
                f"{self.seconds_compiling:.2f} s compiling; {self.xla_calls_taken} calls taken from XLA; "
                f"left alone: {alone}")


SWITCH = Switch()
STATS = HookStats()


def snapshot() -> HookStats:
    with LOCK:
        return copy.deepcopy(STATS)


def reset() -> None:
    """Zero the counters (tests, or a benchmark measuring one phase)."""
    global STATS
    with LOCK:
        STATS = HookStats()


def stats() -> HookStats:
    """The live counters (callers hold ``LOCK`` while they update them)."""
    return STATS


__all__ = ["LOCK", "SWITCH", "HookStats", "Switch", "reset", "snapshot", "stats"]
