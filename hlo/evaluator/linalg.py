"""Evaluator rules (linalg); filled in by its owner."""
