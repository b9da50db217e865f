"""What every role's state machine shares: one entry point, ``handle(*events) -> instructions``.

A machine maps each event type to one handler (:attr:`Machine.handlers`, filled by
:func:`handles`); :meth:`Machine.handle` runs the handlers of the events in order, then
:meth:`Machine.settle`, and returns every instruction they produced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from dpa.engine.events import Event
from dpa.engine.instructions import Instruction

Handler = Callable[[Any, Any], list[Any]]


def handles(*event_types: type[Event]) -> Callable[[Handler], Handler]:
    """Marks a method as the handler of ``event_types`` (collected by :class:`Machine`)."""

    def mark(method: Handler) -> Handler:
        method.__dpa_handles__ = event_types  # type: ignore[attr-defined]
        return method

    return mark


class Machine:
    """Base of the engine's state machines (see the module docstring)."""

    #: Event type -> handler, per subclass.
    handlers: ClassVar[dict[type[Event], Handler]] = {}
    #: The role's name in error messages ("a reducer takes no ... event").
    role: ClassVar[str] = "machine"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.handlers = {event: method for method in vars(cls).values()
                        for event in getattr(method, "__dpa_handles__", ())}

    def handle(self, *events: Event) -> list[Instruction]:
        """Takes events; returns the instructions for the runtime, in order."""
        out: list[Instruction] = []
        for event in events:
            handler = self.handlers.get(type(event))
            if handler is None:
                raise TypeError(f"a {self.role} takes no {type(event).__name__} event")
            out += handler(self, event)
        out += self.settle()
        return out

    def settle(self) -> list[Instruction]:
        """What follows every batch of events (none by default)."""
        return []
