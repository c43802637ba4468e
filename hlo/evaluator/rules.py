"""Placeholder: evaluator rules register here."""
