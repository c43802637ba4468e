"""Placeholder: replaced by the full verifier."""
from hlo.ir import HloModule


def verify(module: HloModule) -> None:
    return None
