"""Shared pytest setup: quiet TensorFlow's C++ logging before any test imports it."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
