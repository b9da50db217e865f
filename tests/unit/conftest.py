"""Fixtures shared by the unit tests (no Ray)."""

from __future__ import annotations

import pytest

import dpa


class Tally(dpa.Reducer):
    """A user-defined reducer that counts records per key through the scalar combine
    contract (:class:`dpa.aggregates.state.DictState`), with ``merge`` so keys may move and split."""

    def create(self):
        return 0

    def add(self, acc, record):
        return acc + 1

    def merge(self, a, b):
        return a + b

    def finalize(self, acc):
        return acc


@pytest.fixture
def tally() -> type[dpa.Reducer]:
    """The :class:`Tally` reducer class (instantiate it with the output column's name)."""
    return Tally

