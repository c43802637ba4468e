"""Deterministic temporary names for generated code (``t1``, ``t2``, ...: a counter, never ``id()``)."""

from __future__ import annotations


class Names:
    """Deterministic temporary names for one generated function."""

    def __init__(self) -> None:
        self.counter = 0

    def fresh(self, base: str = "t") -> str:
        self.counter += 1
        return f"{base}{self.counter}"
