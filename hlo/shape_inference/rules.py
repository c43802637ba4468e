"""Imports every shape-rule module so that each registers its rules."""
