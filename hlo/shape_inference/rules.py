"""Placeholder: shape rules register here."""
