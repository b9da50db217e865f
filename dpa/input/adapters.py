"""Source adapters: how ``dpa.run`` hands inputs it does not know itself to other packages.

``dpa`` knows Arrow, pandas, Ray Datasets, parquet files and iterables. Packages built on
top of it (``spark_bridge`` for Spark DataFrames) plug in an adapter: a predicate that
recognises their source type and a ``run`` that takes ``dpa.run``'s arguments and returns
a :class:`dpa.Result`, like ``dpa.run`` for every other input (``spark_bridge``'s also
carries the result as a Spark DataFrame: ``Result.to_spark()``). Adapters
are registered with :func:`register_source_adapter`, or advertised through the
``dpa.sources`` entry point group (a callable that registers them), which is loaded the
first time ``dpa.run`` meets a source no registered adapter takes. ``dpa`` itself imports
none of those packages: imports run one way only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "dpa.sources"


@dataclass(frozen=True)
class SourceAdapter:
    """A source type another package handles.

    Attributes:
        name: Short name (e.g. ``"spark"``).
        matches: ``matches(source) -> bool``; must be cheap and must not import heavy modules.
        run: ``run(source, key=..., reducer=..., map_fn=..., config=...)`` -> a :class:`dpa.Result`.
    """

    name: str
    matches: Callable[[Any], bool]
    run: Callable[..., Any]


_ADAPTERS: dict[str, SourceAdapter] = {}
_LOCK = threading.Lock()
_LOADED = False


def register_source_adapter(name: str, matches: Callable[[Any], bool], run: Callable[..., Any]) -> None:
    """Registers (or replaces) the adapter called ``name``."""
    with _LOCK:
        _ADAPTERS[name] = SourceAdapter(name, matches, run)


def _load_entry_points() -> None:
    global _LOADED
    with _LOCK:
        if _LOADED:
            return
        _LOADED = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()()
        except Exception as exc:  # a broken plug-in must not break dpa.run for other sources
            logger.warning("dpa source adapter %r could not be loaded: %s: %s", ep.name, type(exc).__name__, exc)


def find_source_adapter(source: Any) -> SourceAdapter | None:
    """The adapter that takes ``source``, or None (dpa handles it itself)."""
    for attempt in range(2):
        for adapter in list(_ADAPTERS.values()):
            if adapter.matches(source):
                return adapter
        if attempt == 0 and not _LOADED:
            _load_entry_points()
        else:
            break
    return None
