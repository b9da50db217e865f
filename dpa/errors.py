"""Exceptions raised by dpa.

Every error dpa raises on purpose is a :class:`DPAError`. Configuration mistakes are
also ``ValueError``/``TypeError`` so callers that catch the builtin types keep working.
"""

from __future__ import annotations

from typing import Any


class DPAError(Exception):
    """Base class of every error raised by dpa on purpose."""


class ConfigError(DPAError, ValueError):
    """A job, policy or reducer configuration is invalid; the message says how to fix it."""


class KeyEncodingError(DPAError, TypeError):
    """A key value has a type dpa cannot encode canonically for hashing."""


class SchemaError(DPAError, ValueError):
    """The input does not have the columns or types the job needs."""


class JobFailedError(DPAError, RuntimeError):
    """A running job failed: a user function raised, an actor died, or the job timed out.

    Attributes:
        actor: Name of the actor where the failure happened, if known.
        key: The key being processed when the failure happened, if known.
    """

    def __init__(self, message: str, *, actor: str | None = None, key: object = None):
        super().__init__(message)
        self.actor = actor
        self.key = key

    def __reduce__(self):
        return (_rebuild_job_failed, (str(self), self.actor, self.key))


def _rebuild_job_failed(message: str, actor: str | None, key: object) -> JobFailedError:
    return JobFailedError(message, actor=actor, key=key)


class ArithmeticOverflowError(DPAError, OverflowError):
    """An aggregate left the range of its result type (e.g. a ``Sum`` of an int64 column).

    dpa raises instead of wrapping around, as Spark does in ANSI mode: a wrong number is
    never returned. The message names the column and the key, and how to widen the type.

    Attributes:
        column: The input column being aggregated, if known.
        key: The key whose aggregate overflowed, if known.
    """

    def __init__(self, message: str, *, column: str | None = None, key: object = None):
        super().__init__(message)
        self.column = column
        self.key = key

    def __reduce__(self):
        return (_rebuild_overflow, (str(self), self.column, self.key))


def _rebuild_overflow(message: str, column: str | None, key: object) -> ArithmeticOverflowError:
    return ArithmeticOverflowError(message, column=column, key=key)


class UserCodeError(DPAError, RuntimeError):
    """A user function (``map_fn``, ``key``, reducer) raised; wraps the original exception."""

    def __init__(self, message: str, *, key: Any = None, record: Any = None):
        super().__init__(message)
        self.key = key
        self.record = record

    def __reduce__(self):
        return (_rebuild_user_error, (str(self), self.key, self.record))


def _rebuild_user_error(message: str, key: Any, record: Any) -> UserCodeError:
    return UserCodeError(message, key=key, record=record)
