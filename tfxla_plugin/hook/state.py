"""The hook's switch, its counters and its record of each graph: the process-wide state of ``tfxla_plugin.hook``.

``Switch`` says whether the callback rewrites graphs and how (``must_compile``: ``enable(jit_compile=True)``),
and remembers TF's remapper setting to restore on ``disable``. ``HookStats`` counts what the hook did
while it was on; ``snapshot()`` copies it for ``tfxla_plugin.stats()``. ``HookedGraph`` is what the hook
decided for one function body, kept under TF's name of the function (Grappler's item id,
``__inference_f_12``) for ``tfxla_plugin.explain_hooked`` and the TensorBoard export: the last
``MAX_GRAPHS`` names (LRU; a retraced function reusing a rewrite shares its record). All of it is guarded
by ``LOCK``: Grappler may call the hook from several TF threads at once (each holding the GIL only
between compiler subprocess waits).
"""

from __future__ import annotations

import copy
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

LOCK = threading.Lock()
# Records kept (LRU): at most MAX_GRAPHS function names (a Keras fit makes ~16 graphs, most of them small
# bookkeeping ones), and at most MAX_GRAPH_BYTES of them as ``HookedGraph.size`` estimates it (a record holds
# its clusters' HLO and C source: a big training step's is tens of MB).
MAX_GRAPHS = 256
MAX_GRAPH_BYTES = 256 << 20
REWRITTEN = "rewritten"  # HookedGraph.decision of a graph returned with TfxlaLaunch nodes
RELEASED = "calls taken from XLA"  # ... of one returned only with its jit_compile=True calls released


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
    shape_twins: int = 0  # twins for static shapes made for eager calls of functions traced with unknown dims
    left_alone: Counter = field(default_factory=Counter)  # why graphs were returned unchanged -> count
    left_in_tf: Counter = field(default_factory=Counter)  # rewritten graphs that kept compute nodes in TF, by why

    def __str__(self) -> str:
        alone = ", ".join(f"{reason}: {n}" for reason, n in self.left_alone.most_common()) or "none"
        kept = ", ".join(f"{reason}: {n}" for reason, n in self.left_in_tf.most_common())
        return (f"graphs seen {self.graphs_seen}, rewritten {self.graphs_rewritten}; clusters compiled "
                f"{self.clusters_compiled} ({self.kernel_cache_hits} kernel cache hits), "
                f"{self.seconds_compiling:.2f} s compiling; {self.xla_calls_taken} calls taken from XLA; "
                f"{self.shape_twins} static-shape twins; "
                f"left alone: {alone}" + (f"; rewritten, with nodes left in TF: {kept}" if kept else ""))


@dataclass(frozen=True)
class HookedGraph:
    """What the hook decided for one function body. ``analysis``, ``clusters`` and ``rewritten`` are named as
    a ``CompiledGraph``'s, so ``tfxla_plugin.explain`` and ``tfxla_plugin.tensorboard`` render either."""

    function: str  # TF's name of the function (Grappler's item id); "" when TF gave none
    decision: str  # REWRITTEN, RELEASED, or why it was left alone (a stats().left_alone reason)
    detail: str = ""  # the failure's message, the nodes must-compile refused
    analysis: Any = None  # graph_passes ClusteringResult (None: the passes did not run)
    clusters: tuple = ()  # CompiledCluster per compiled cluster
    rewritten: Any = None  # graph_passes RewriteResult: what TF runs instead (None: TF's graph as it was)
    released: tuple = ()  # call nodes whose _XlaMustCompile the hook turned off
    seconds: float = 0.0

    @property
    def size(self) -> int:
        """Roughly the bytes it holds: its graphs, and per cluster its C source with the HLO behind it."""
        graphs = [g for g in (getattr(self.analysis, "graph_def", None), getattr(self.rewritten, "graph_def", None)) if g]
        return sum(g.ByteSize() for g in graphs) + sum(4 * len(c.c_source) for c in self.clusters)


SWITCH = Switch()
STATS = HookStats()
_GRAPHS: OrderedDict[str, tuple[HookedGraph, int]] = OrderedDict()  # name -> (record, its size)
_graph_bytes = 0


def keep(name: str, graph: HookedGraph) -> None:
    """Record ``graph`` under the function name ``name`` (LRU: ``MAX_GRAPHS``, ``MAX_GRAPH_BYTES``; the newest
    record stays whatever its size); callers hold ``LOCK``."""
    global _graph_bytes
    if not name:
        return
    size = graph.size
    _graph_bytes += size - _GRAPHS.get(name, (None, 0))[1]
    _GRAPHS[name] = (graph, size)
    _GRAPHS.move_to_end(name)
    while len(_GRAPHS) > 1 and (len(_GRAPHS) > MAX_GRAPHS or _graph_bytes > MAX_GRAPH_BYTES):
        _graph_bytes -= _GRAPHS.popitem(last=False)[1][1]


def hooked(name: str) -> HookedGraph | None:
    """The record of the function body TF calls ``name``, if the hook saw it (and still remembers it)."""
    with LOCK:
        return _GRAPHS.get(name, (None, 0))[0]


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


__all__ = ["LOCK", "MAX_GRAPH_BYTES", "MAX_GRAPHS", "RELEASED", "REWRITTEN", "SWITCH", "HookStats", "HookedGraph", "Switch", "hooked",
           "keep", "reset", "snapshot", "stats"]
