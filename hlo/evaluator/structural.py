"""Evaluator rules (structural); filled in by its owner."""
