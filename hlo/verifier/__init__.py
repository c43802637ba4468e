"""The HLO verifier: ``verify(module)`` raises ``HloVerifierError`` naming the bad instruction."""

from hlo.verifier.verifier import verify

__all__ = ["verify"]
