"""What installed packages plug into the ``dpa`` command line, found through entry points.

The command line imports no package above ``dpa``. Packages that offer experiments,
benchmarks or named workloads advertise them in entry point groups of their
``pyproject.toml`` (``[project.entry-points."dpa.experiments"]`` and so on):

* ``dpa.experiments`` — ``NAME = "pkg.module:main"``: ``main(argv)`` of a script that
  ``dpa experiment NAME ARGS...`` runs;
* ``dpa.benchmarks`` — the same for ``dpa bench NAME ARGS...``;
* ``dpa.inputs`` — ``NAME = "pkg.module:make"``: ``make(name, options)`` returns the
  :class:`dpa.tools.cli.inputs.Input` that ``dpa run NAME`` / ``dpa simulate NAME`` process
  (``options`` is a :class:`dpa.tools.cli.inputs.InputOptions`); names match case-insensitively;
* ``dpa.references`` — ``NAME = "pkg.module:TABLE"``: published skews
  ``{(workload, method): (S without LB, S with LB)}`` that ``dpa experiment --report DIR
  NAME`` (and ``dpa report --table1 FILE``, with the ``table1`` entry) plot beside the
  measured ones.

Listing names imports nothing (``dpa experiment --list``); an entry is imported only when
it is used.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from dpa.tools.cli.errors import UsageError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginGroup:
    """One entry point group and how the command line talks about its entries.

    Attributes:
        group: The entry point group, e.g. ``"dpa.experiments"``.
        kind: What one entry is called in messages, e.g. ``"experiment"``.
        plural: The same in the plural, e.g. ``"experiments"``.
    """

    group: str
    kind: str
    plural: str


EXPERIMENTS = PluginGroup("dpa.experiments", "experiment", "experiments")
BENCHMARKS = PluginGroup("dpa.benchmarks", "benchmark", "benchmarks")
INPUTS = PluginGroup("dpa.inputs", "workload", "named workloads")
REFERENCES = PluginGroup("dpa.references", "reference table", "reference tables")


def registered(plugins: PluginGroup) -> dict[str, EntryPoint]:
    """The installed entries of a group by name, sorted by name; imports nothing.

    When two distributions register the same name, the first one found is kept.
    """
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=plugins.group):
        if ep.name in found:
            logger.debug("%s %r registered twice; keeping %s, ignoring %s",
                         plugins.kind, ep.name, found[ep.name].value, ep.value)
            continue
        found[ep.name] = ep
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def find(plugins: PluginGroup, name: str, *, ignore_case: bool = False) -> EntryPoint | None:
    """The entry called ``name`` (exactly, else case-insensitively if asked), or None."""
    entries = registered(plugins)
    if name in entries:
        return entries[name]
    if ignore_case:
        matches = [ep for key, ep in entries.items() if key.lower() == name.lower()]
        if len(matches) == 1:
            return matches[0]
    return None


def not_installed_message(plugins: PluginGroup) -> str:
    """The one line saying that no package registers anything in the group."""
    return (f"no {plugins.plural} are installed (packages provide them through the "
            f"'{plugins.group}' entry point group)")


def load(plugins: PluginGroup, name: str, *, ignore_case: bool = False) -> tuple[str, Any]:
    """Imports the entry called ``name``.

    Args:
        plugins: The group to look in.
        name: The name given on the command line.
        ignore_case: Match names case-insensitively.

    Returns:
        ``(registered name, loaded object)``.

    Raises:
        UsageError: Nothing is installed in the group, ``name`` is not among the entries
            (the message lists them), or the module the entry points at is missing.
    """
    entries = registered(plugins)
    if not entries:
        raise UsageError(not_installed_message(plugins))
    ep = find(plugins, name, ignore_case=ignore_case)
    if ep is None:
        raise UsageError(f"unknown {plugins.kind} {name!r}; installed: {', '.join(entries)}")
    try:
        return ep.name, ep.load()
    except ModuleNotFoundError as exc:
        module = ep.value.split(":", 1)[0].strip()
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise UsageError(f"{plugins.kind} {ep.name!r} is registered as {ep.value!r}, "
                             f"but {exc.name} is not installed") from None
        raise


def load_optional(plugins: PluginGroup, name: str) -> Any | None:
    """The loaded entry called ``name`` (exact name), or None when there is none."""
    ep = find(plugins, name)
    if ep is None:
        return None
    try:
        return ep.load()
    except ImportError as exc:
        logger.warning("%s %r (%s) could not be loaded: %s", plugins.kind, ep.name, ep.value, exc)
        return None


def listing(plugins: PluginGroup) -> list[str]:
    """Lines ``NAME  module:attr`` of a group, or one line saying that none is installed."""
    entries = registered(plugins)
    if not entries:
        return [not_installed_message(plugins)]
    width = max(len(name) for name in entries)
    return [f"{name:<{width}}  {ep.value}" for name, ep in entries.items()]
