"""Tables keyed by opcode, filled by decorators: ``top_level = registrar(TOP_LEVEL)``, then
``@top_level(Opcode.WHILE)`` above a function registers it for that opcode (a later one replaces it)."""

from __future__ import annotations

from typing import Callable, TypeVar

from hlo.opcodes import Opcode

F = TypeVar("F", bound=Callable)


def registrar(table: dict[Opcode, F]) -> Callable[..., Callable[[F], F]]:
    """The decorator factory that registers a function in ``table`` under each opcode it is given."""
    def for_opcodes(*opcodes: Opcode) -> Callable[[F], F]:
        def register(fn: F) -> F:
            for op in opcodes:
                table[op] = fn
            return fn
        return register
    return for_opcodes
