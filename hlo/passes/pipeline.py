"""Pass pipeline and fixed-point driver (see the package docstring for the pass contract)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from hlo.errors import HloVerifierError
from hlo.ir import HloModule
from hlo.verifier import verify


class HloPass(Protocol):
    @property
    def name(self) -> str: ...  # read-only: passes are frozen dataclasses

    def run(self, module: HloModule) -> HloModule: ...


@dataclass(frozen=True)
class PipelineOptions:
    verify: bool = True
    disabled: frozenset[str] = frozenset()
    # Called after every pass that changed the module: dump(step_index, pass_name, module).
    dump: Callable[[int, str, HloModule], None] | None = None


def _fingerprint(module: HloModule) -> str:
    return hashlib.sha256(module.to_text(print_metadata=False).encode()).hexdigest()


@dataclass
class FixedPoint:
    """Run ``passes`` in order until a round changes nothing (at most ``max_rounds`` rounds)."""

    passes: Sequence[HloPass]
    max_rounds: int = 25
    name: str = "fixed-point"
    options: PipelineOptions = field(default_factory=PipelineOptions)
    rounds_run: int = 0

    def run(self, module: HloModule) -> HloModule:
        seen = {_fingerprint(module)}
        for round_no in range(1, self.max_rounds + 1):
            self.rounds_run = round_no
            before = module
            module = Pipeline(self.passes, self.options, name=f"{self.name}.{round_no}").run(module)
            if module is before:
                break
            fp = _fingerprint(module)
            if fp in seen:  # passes undo each other: stop instead of looping
                break
            seen.add(fp)
        return module


class Pipeline:
    """Runs passes in order; verifies after every pass that changed the module."""

    def __init__(self, passes: Sequence[HloPass], options: PipelineOptions | None = None, name: str = "pipeline"):
        self.passes = list(passes)
        self.options = options or PipelineOptions()
        self.name = name
        self.log: list[tuple[str, bool]] = []  # (pass name, changed)

    def run(self, module: HloModule) -> HloModule:
        for step, p in enumerate(self.passes):
            if p.name in self.options.disabled:
                continue
            if isinstance(p, FixedPoint) and p.options is not self.options:
                p.options = self.options
            result = p.run(module)
            changed = result is not module
            self.log.append((p.name, changed))
            if changed:
                if self.options.verify:
                    try:
                        verify(result)
                    except HloVerifierError as e:
                        raise HloVerifierError(f"after pass {p.name}: {e}") from e
                if self.options.dump is not None:
                    self.options.dump(step, p.name, result)
                module = result
        return module
