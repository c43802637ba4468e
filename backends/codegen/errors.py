"""The exceptions every backend's code generator raises.

``CodegenUnsupported`` is a refusal, not a bug: an instruction (or element type, or attribute) a
backend has no code for, with a message that names the instruction, the backend (through its
``Dialect.backend``) and the reason. ``backends.cpu.CodegenUnsupported`` and
``backends.cuda.CodegenUnsupported`` are this class, so callers catch one type for every backend.
"""

from __future__ import annotations


class CodegenUnsupported(NotImplementedError):
    """An instruction a backend cannot generate code for (the message names the backend and why)."""
