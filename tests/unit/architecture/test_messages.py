"""Events and instructions: one base class each, every one a frozen dataclass."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from dpa.engine import events, instructions
from dpa.engine.balancer import BalancerMachine
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.events import Event
from dpa.engine.instructions import Instruction
from dpa.engine.mapper_machine import MapperMachine
from dpa.engine.reducer_machine import ReducerMachine


def _defined_in(module: object) -> list[type]:
    return [obj for _, obj in inspect.getmembers(module, inspect.isclass) if obj.__module__ == module.__name__]


@pytest.mark.parametrize("module, base", [(events, Event), (instructions, Instruction)])
def test_every_message_has_the_base_and_is_a_frozen_dataclass(module: object, base: type) -> None:
    classes = [c for c in _defined_in(module) if c is not base]
    assert len(classes) > 5
    for cls in classes:
        assert issubclass(cls, base), f"{cls.__name__} does not derive from {base.__name__}"
        assert dataclasses.is_dataclass(cls), f"{cls.__name__} is not a dataclass"
        assert cls.__dataclass_params__.frozen, f"{cls.__name__} is not frozen"


@pytest.mark.parametrize("machine", [ReducerMachine, MapperMachine, CoordinatorMachine])
def test_machines_take_events_only(machine: type) -> None:
    assert machine.handlers
    for event_type in machine.handlers:
        assert issubclass(event_type, Event), f"{machine.__name__} handles {event_type.__name__}, not an Event"


def test_balancer_takes_events_only() -> None:
    handled = getattr(BalancerMachine, "handlers", {})
    for event_type in handled:
        assert issubclass(event_type, Event)
