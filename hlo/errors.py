"""Errors raised by the HLO layer; each says where and what was expected."""

from __future__ import annotations

from typing import Iterable


def first_duplicate(names: Iterable[str]) -> str | None:
    """The first name that occurs a second time (for "defined more than once" errors), or None."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


class HloError(Exception):
    """Base class of HLO errors."""


class HloParseError(HloError):
    """Malformed HLO text; carries the 1-based line and column."""

    def __init__(self, message: str, line: int, column: int):
        super().__init__(f"{line}:{column}: {message}")
        self.message = message
        self.line = line
        self.column = column


class HloVerifierError(HloError):
    """A module that is not well formed: names the computation and instruction."""

    def __init__(self, message: str, computation: str | None = None, instruction: str | None = None):
        where = ""
        if computation is not None:
            where = f"in computation %{computation}"
            if instruction is not None:
                where += f", instruction %{instruction}"
            where += ": "
        super().__init__(where + message)
        self.computation = computation
        self.instruction = instruction


class HloEvaluationError(HloError):
    """Wrong arguments for, or an unevaluable instruction in, ``hlo.evaluate``."""


class HloInvalidArgumentError(HloEvaluationError):
    """The data is invalid for the program (a failed ``index_check``): TF's InvalidArgumentError, with
    TF's message; compiled kernels return ``TFXLA_STATUS_INVALID_ARGUMENT`` with the same message."""
