"""Finding Java for Spark, and the JVM options Spark 3.5 with RayDP needs on Java 17.

:func:`check_java` fails early with an actionable message (which version was found, how to
install one) instead of a py4j stack trace.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess

from dpa.errors import DPAError

logger = logging.getLogger(__name__)


_INSTALL_HINT = (
    "Install a JDK/JRE (Java 8, 11 or 17; 17 recommended), e.g. "
    "`apt-get install -y openjdk-17-jre-headless`, then either put `java` on PATH or set "
    "JAVA_HOME to the installation directory (the one containing bin/java)."
)

_ADD_OPENS_PACKAGES = (
    "java.lang",
    "java.lang.invoke",
    "java.io",
    "java.net",
    "java.nio",
    "java.math",
    "java.text",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)

#: JVM flags Spark 3.5 + RayDP need on Java 17. ``-XX:+IgnoreUnrecognizedVMOptions`` makes
#: the same string harmless on Java 8, which does not know ``--add-opens``.
JAVA17_OPTIONS: str = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions"]
    + [f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in _ADD_OPENS_PACKAGES]
)



class JavaNotFoundError(DPAError, RuntimeError):
    """No usable Java runtime was found (missing, broken, or older than required)."""


# --------------------------------------------------------------------------- Java checks


def find_java() -> str | None:
    """Locate the ``java`` binary the way Spark's launcher does.

    ``$JAVA_HOME/bin/java`` wins when ``JAVA_HOME`` is set (even if it does not exist, so a
    stale ``JAVA_HOME`` is reported instead of silently ignored); otherwise ``java`` on PATH.

    Returns:
        Path of the java executable, or ``None`` if there is none.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "java")
        return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def parse_java_version(text: str) -> tuple[int, ...] | None:
    """Parse the output of ``java -version``.

    Legacy ``1.x`` versions are normalised so the first element is the major version:
    ``"1.8.0_292"`` -> ``(8, 0, 292)``; ``"17.0.15"`` -> ``(17, 0, 15)``; ``"21"`` -> ``(21,)``.

    Args:
        text: Combined stdout/stderr of ``java -version``.

    Returns:
        The version as a tuple of ints, or ``None`` if no version string was found.
    """
    match = re.search(r'version\s+"([^"]+)"', text)
    if match is None:
        # Some builds print e.g. `openjdk 17.0.15 2025-04-15` (java --version style).
        match = re.search(r"^\s*(?:openjdk|java)\s+(\d[\w.+-]*)", text, re.MULTILINE)
        if match is None:
            return None
    parts = [int(p) for p in re.findall(r"\d+", match.group(1).split("-")[0].split("+")[0])]
    if not parts:
        return None
    if parts[0] == 1 and len(parts) > 1:
        parts = parts[1:]
    return tuple(parts)


def _java_version_output(java: str) -> str | None:
    try:
        proc = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.debug("running %s -version failed: %s", java, exc)
        return None
    return (proc.stderr or "") + "\n" + (proc.stdout or "")


def java_version(java: str | None = None) -> tuple[int, ...] | None:
    """Return the version of the Java runtime Spark would use.

    Args:
        java: Path of a java executable; by default :func:`find_java` decides.

    Returns:
        The parsed version (see :func:`parse_java_version`), or ``None`` if there is no java
        or it could not be run / parsed.
    """
    java = java or find_java()
    if java is None:
        return None
    output = _java_version_output(java)
    return None if output is None else parse_java_version(output)


def check_java(min_major: int = 8) -> tuple[int, ...]:
    """Fail early, with instructions, if Spark cannot start a JVM.

    Args:
        min_major: Lowest acceptable major Java version.

    Returns:
        The detected Java version.

    Raises:
        JavaNotFoundError: If java is missing, cannot be run, or is older than ``min_major``.
    """
    java_home = os.environ.get("JAVA_HOME")
    java = find_java()
    if java is None:
        if java_home:
            where = f"JAVA_HOME is set to {java_home!r} but {java_home}/bin/java does not exist"
        else:
            where = "`java` was not found on PATH and JAVA_HOME is not set"
        raise JavaNotFoundError(f"Spark needs a Java runtime: {where}. {_INSTALL_HINT}")
    output = _java_version_output(java)
    version = None if output is None else parse_java_version(output)
    if version is None:
        raise JavaNotFoundError(
            f"Could not determine the Java version of {java} (`{java} -version` failed or "
            f"printed no version). {_INSTALL_HINT}"
        )
    if version[0] < min_major:
        match = re.search(r'version\s+"([^"]+)"', output or "")
        found = match.group(1) if match else ".".join(map(str, version))
        raise JavaNotFoundError(
            f"Java {found} found at {java} is too old: Spark needs Java {min_major} or newer. "
            f"{_INSTALL_HINT}"
        )
    return version
