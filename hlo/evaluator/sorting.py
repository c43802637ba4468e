"""Evaluator rules (sorting); filled in by its owner."""
