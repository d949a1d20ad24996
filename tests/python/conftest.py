"""Shared fixtures of the Python tests: the `ka` package from the build tree (PYTHONPATH set by
tests/python/CMakeLists.txt), and every test starting and ending with libtorch's kernels."""

import pytest
import torch

import ka


@pytest.fixture(autouse=True)
def stock_torch_around_each_test():
    ka.disable()
    ka.reset()
    torch.manual_seed(0)
    yield
    ka.disable()


def served(op):
    """How many of the logged calls of `op` ran on ka's kernels, and how many fell back."""
    on_ka = sum(r["ka_calls"] for r in ka.report() if r["op"] == op)
    fallback = sum(r["fallback_calls"] for r in ka.report() if r["op"] == op)
    return on_ka, fallback
