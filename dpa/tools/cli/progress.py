"""Progress of a running job: a tqdm bar on a terminal, plain lines otherwise.

:func:`run_with_progress` passes a :class:`ProgressDisplay` to :func:`dpa.run` as its
``progress`` callback. On a terminal (stderr) it draws a tqdm bar once the job has run for
:data:`BAR_DELAY_S` seconds; otherwise it prints one
plain line every few seconds, so logs of long jobs still show that they move.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)

#: Seconds a job runs before its progress bar appears.
BAR_DELAY_S = 3.0


class ProgressDisplay:
    """Records processed so far: a tqdm bar on a terminal, else a plain line every ``interval`` s.

    Callable as ``display(done, total=None)`` from any thread (the signature of
    ``dpa.run(progress=...)``).
    """

    def __init__(self, total: int | None, desc: str, *, enabled: bool = True, stream: Any = None,
                 interval: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.interval = interval
        self.done = 0
        self.started = time.monotonic()
        self.last_line = self.started
        self.lock = threading.Lock()
        self.bar = None
        isatty = getattr(self.stream, "isatty", lambda: False)()
        if enabled and isatty:
            from tqdm import tqdm

            try:
                columns = os.get_terminal_size(self.stream.fileno()).columns
            except (AttributeError, OSError, ValueError):
                columns = 0
            # Some pseudo-terminals report 0 columns, which would make tqdm print nothing.
            width = {"dynamic_ncols": True} if columns > 0 else {"ncols": 100, "nrows": 24}
            # delay: a job done within a few seconds leaves no bar behind, only its result.
            self.bar = tqdm(total=total, desc=desc, unit="rec", unit_scale=True, file=self.stream,
                            mininterval=0.2, leave=True, delay=BAR_DELAY_S, **width)

    def __call__(self, done: int, total: int | None = None) -> None:
        if not self.enabled:
            return
        with self.lock:
            if total is not None and total != self.total:
                self.total = total
                if self.bar is not None:
                    self.bar.total = total
                    self.bar.refresh()
            done = int(done)
            if done <= self.done:
                return
            if self.bar is not None:
                self.bar.update(done - self.done)
            self.done = done
            now = time.monotonic()
            if self.bar is None and now - self.last_line >= self.interval:
                self.last_line = now
                print(self._line(now), file=self.stream, flush=True)

    def _line(self, now: float) -> str:
        rate = self.done / max(1e-9, now - self.started)
        of = f"/{self.total:,}" if self.total else ""
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        return f"{self.desc}: {self.done:,}{of} records{pct}, {rate:,.0f} rec/s"

    def close(self, done: int | None = None) -> None:
        """Shows ``done`` (if given) and ends the display; later calls do nothing."""
        if done is not None:
            self(done)
        with self.lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            self.enabled = False


def run_with_progress(source: Any, *, total: int | None, desc: str, show: bool, **kwargs: Any) -> Any:
    """``dpa.run(source, **kwargs)``, showing its progress when ``show``.

    Args:
        source: What ``dpa.run`` reads.
        total: Records expected, when known (the bar's 100%).
        desc: The bar's label.
        show: Display progress at all.
        **kwargs: ``dpa.run``'s other arguments (``key``, ``reducer``, ``config``, ...).

    Returns:
        The :class:`dpa.Result`.
    """
    import dpa

    display = ProgressDisplay(total, desc, enabled=show)
    if show:
        kwargs["progress"] = display
    try:
        result = dpa.run(source, **kwargs)
        display(result.stats.total_processed)  # end at the true count
    finally:
        display.close()
    return result
