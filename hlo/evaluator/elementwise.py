"""Evaluator rules (elementwise); filled in by its owner."""
