"""Exceptions raised by dpa.

Every error dpa raises on purpose is a :class:`DPAError`. Configuration mistakes are
also ``ValueError``/``TypeError`` so callers that catch the builtin types keep working.
"""

from __future__ import annotations

from typing import Any


class DPAError(Exception):
    """Base class of every error raised by dpa on purpose."""


class _PicklesDetails:
    """Mixin of the errors with keyword details: pickling keeps them (Ray ships errors).

    A subclass names its keyword arguments in ``_details``; its ``__init__`` takes the
    message and those keywords, and stores each under its name.
    """

    _details: tuple[str, ...] = ()

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), {name: getattr(self, name) for name in self._details}))


def _rebuild(cls: type[DPAError], message: str, details: dict[str, Any]) -> DPAError:
    return cls(message, **details)


class ConfigError(DPAError, ValueError):
    """A job, policy or reducer configuration is invalid; the message says how to fix it."""


class KeyEncodingError(DPAError, TypeError):
    """A key value has a type dpa cannot encode canonically for hashing."""


class SchemaError(DPAError, ValueError):
    """The input does not have the columns or types the job needs."""


class JobFailedError(_PicklesDetails, DPAError, RuntimeError):
    """A running job failed: a user function raised, an actor died, or the job timed out.

    Attributes:
        actor: Name of the actor where the failure happened, if known.
        key: The key being processed when the failure happened, if known.
    """

    _details = ("actor", "key")

    def __init__(self, message: str, *, actor: str | None = None, key: object = None):
        super().__init__(message)
        self.actor = actor
        self.key = key


class GroupTooLargeError(JobFailedError):
    """One key's rows exceed ``GroupApply(max_group_bytes=...)``: the message names the key,
    its rows and bytes."""


class ArithmeticOverflowError(_PicklesDetails, DPAError, OverflowError):
    """An aggregate left the range of its result type (e.g. a ``Sum`` of an int64 column).

    dpa raises instead of wrapping around, as Spark does in ANSI mode: a wrong number is
    never returned. The message names the column and the key, and how to widen the type.

    Attributes:
        column: The input column being aggregated, if known.
        key: The key whose aggregate overflowed, if known.
    """

    _details = ("column", "key")

    def __init__(self, message: str, *, column: str | None = None, key: object = None):
        super().__init__(message)
        self.column = column
        self.key = key


class UserCodeError(_PicklesDetails, DPAError, RuntimeError):
    """A user function (``map_fn``, ``key``, reducer) raised; wraps the original exception."""

    _details = ("key", "record")

    def __init__(self, message: str, *, key: Any = None, record: Any = None):
        super().__init__(message)
        self.key = key
        self.record = record
