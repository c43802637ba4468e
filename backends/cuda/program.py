"""What the host runs: a program of kernel launches, copies and host-side control flow.

A compiled module is one CUDA source (all kernels) plus a ``Program``: the
ENTRY computation as a sequence of steps over device buffers, in the style of
XLA's GPU thunks. Buffers are named by ``BufRef``: an entry input or output
(allocated once per executable), a byte offset into the scratch arena (sized
by buffer assignment), or a ``__device__`` global of the module (constants).
While loops and conditionals run on the host: their predicate or branch
index is copied back after the condition's kernels ran. Everything here is
plain frozen data, printed by ``render`` so tests can read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class BufRef:
    space: str  # "input", "output", "scratch", "global"
    index: int = 0  # input/output number
    offset: int = 0  # bytes into the scratch arena (or into a global)
    symbol: str = ""  # the __device__ array, for "global"
    nbytes: int = 0

    def __str__(self) -> str:
        if self.space == "global":
            return f"{self.symbol}+{self.offset}"
        if self.space == "scratch":
            return f"scratch+{self.offset}"
        return f"{self.space}{self.index}"


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[BufRef, ...]
    shared_bytes: int = 0


@dataclass(frozen=True)
class Copy:
    dst: BufRef
    src: BufRef
    nbytes: int


@dataclass(frozen=True)
class WhileLoop:
    """``cond`` writes a pred into ``pred``; while it is true, ``body`` runs (it copies its result back)."""

    cond: "tuple[Step, ...]"
    pred: BufRef
    body: "tuple[Step, ...]"


@dataclass(frozen=True)
class Switch:
    """Runs ``branches[index]`` (a pred index selects branch 0 when true, 1 when false, as in HLO);
    an s32 index out of range runs the last branch."""

    index: BufRef
    is_pred: bool
    branches: "tuple[tuple[Step, ...], ...]"


Step = Union[Launch, Copy, WhileLoop, Switch]


@dataclass(frozen=True)
class Program:
    steps: tuple[Step, ...]
    scratch_bytes: int

    def launches(self) -> list[Launch]:
        out: list[Launch] = []

        def walk(steps):
            for s in steps:
                if isinstance(s, Launch):
                    out.append(s)
                elif isinstance(s, WhileLoop):
                    walk(s.cond)
                    walk(s.body)
                elif isinstance(s, Switch):
                    for b in s.branches:
                        walk(b)
        walk(self.steps)
        return out


def render(steps, indent: str = "") -> str:
    lines = []
    for s in steps:
        if isinstance(s, Launch):
            lines.append(f"{indent}launch {s.kernel}<<<{s.grid}, {s.block}, {s.shared_bytes}>>>"
                         f"({', '.join(map(str, s.args))})")
        elif isinstance(s, Copy):
            lines.append(f"{indent}copy {s.dst} <- {s.src} ({s.nbytes} bytes)")
        elif isinstance(s, WhileLoop):
            lines.append(f"{indent}while:")
            lines.append(render(s.cond, indent + "  cond "))
            lines.append(f"{indent}  if !{s.pred}: break")
            lines.append(render(s.body, indent + "  body "))
        elif isinstance(s, Switch):
            lines.append(f"{indent}switch {s.index}:")
            for k, b in enumerate(s.branches):
                lines.append(render(b, indent + f"  [{k}] "))
    return "\n".join(x for x in lines if x)
