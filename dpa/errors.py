"""Exceptions raised by dpa.

Every error dpa raises on purpose is a :class:`DPAError`. Configuration mistakes are
also ``ValueError``/``TypeError`` so callers that catch the builtin types keep working.
"""

from __future__ import annotations


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
