"""Progress of a long run on stderr: done/total, rate and time left.

On a terminal a rich progress bar is redrawn in place (at most every 0.1 s); otherwise (a log, CI) a
plain line is written every ``every_s`` seconds, so a long run shows it is alive without
flooding the log. The rate counts only what this run did: a resumed run that starts at
400/899 does not claim the first 400 as its own speed.
"""
from __future__ import annotations

import re
import time
from typing import Callable, TextIO


class RateProgress:
    """done/total with this run's rate and the time left. On a terminal, a rich progress bar redrawn in
    place (at most every 0.1 s; messages given to ``log`` print above it); elsewhere a plain line every
    ``every_s`` seconds. Call it as ``progress(done, total, item)``; ``close()`` when the run ends."""

    def __init__(self, stream: TextIO, what: str, unit: str, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.stream, self.what, self.unit, self.every_s, self.clock = stream, what, unit, every_s, clock
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.start: float | None = None
        self.start_done = 0
        self.last = 0.0
        self.drawn = False
        self._bar = None
        self._task = None

    def __call__(self, done: int, total: int, item: str = "") -> None:
        now = self.clock()
        if self.start is None:
            self.start, self.start_done, self.last = now, done, now
            if not self.tty:
                return
        if self.tty:
            if now - self.last < 0.1 and done < total and self.drawn:
                return
            try:
                self._draw(done, total, self.line(done, total, now, item))
            except ImportError:  # no rich here: one plain line, redrawn
                self.stream.write("\r" + self.line(done, total, now, item)[:100].ljust(100))
                self.stream.flush()
        elif now - self.last >= self.every_s:
            self.stream.write(self.line(done, total, now, item) + "\n")
            self.stream.flush()
        else:
            return
        self.last = now

    def _draw(self, done: int, total: int, stats: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        if self._bar is None:
            console = Console(file=self.stream, force_terminal=True, highlight=False, width=max(120, _width()))
            self._bar = Progress(BarColumn(bar_width=24),
                                 TextColumn("{task.fields[stats]}"), console=console, auto_refresh=False,
                                 transient=True, get_time=self.clock)
            self._bar.start()
            self._task = self._bar.add_task(self.what, total=total or 1, completed=done, stats=stats)
        self._bar.update(self._task, total=total or 1, completed=done, stats=stats)
        self._bar.refresh()
        self.drawn = True

    def log(self, message: str) -> None:
        """A message line; on a terminal printed above the bar, which is redrawn below it."""
        if self._bar is not None:
            self._bar.console.print(message, markup=False, highlight=False)
            self._bar.refresh()
        else:
            self.stream.write(message + "\n")
            self.stream.flush()

    def line(self, done: int, total: int, now: float, item: str = "") -> str:
        elapsed = now - (self.start if self.start is not None else now)
        rate = (done - self.start_done) / elapsed if elapsed > 0 else 0.0
        eta = _duration((total - done) / rate) if rate > 0 else "?"
        pct = 100 * done // total if total else 100
        tail = f"  {item}" if item else ""
        return f"{self.what}: {done}/{total} {self.unit} ({pct} %), {rate:.1f} {self.unit}/s, ETA {eta}{tail}"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class StepProgress:
    """``skel apply``'s progress: its messages (``[3/12] gate: SK001``, ``[3/12] accepted ...``) on stderr,
    and a RateProgress over the candidates judged, from the ``[i/n]`` the messages carry. ``quiet``: nothing."""

    STEP = re.compile(r"^\[(?:second round )?(\d+)/(\d+)\] (?!gate)")

    def __init__(self, stream: TextIO, what: str, quiet: bool = False, clock: Callable[[], float] = time.monotonic):
        self.quiet = quiet
        self.rate = RateProgress(stream, what, "candidates", every_s=30.0, clock=clock)
        self.prefix = f"{what}: "

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        self.rate.log(self.prefix + message)
        m = self.STEP.match(message)
        if m:
            self.rate(int(m.group(1)), int(m.group(2)))

    def close(self) -> None:
        self.rate.close()


def _width() -> int:
    import shutil

    return shutil.get_terminal_size((120, 24)).columns


class TallyProgress:
    """How a batch of Ray tasks stands (``skel.executor.Tally``): done / running / queued / failed, on one
    redrawn line on a terminal, a line every ``every_s`` seconds otherwise."""

    def __init__(self, stream: TextIO, what: str, unit: str, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.stream, self.what, self.unit, self.every_s, self.clock = stream, what, unit, every_s, clock
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.last: float | None = None
        self.drawn = False

    def __call__(self, tally) -> None:
        now = self.clock()
        finished = tally.done + tally.failed == tally.total
        if self.last is not None and now - self.last < (0.1 if self.tty else self.every_s) and not finished:
            return
        line = f"{self.what}: {tally.line(self.unit)}"
        if self.tty:
            self.stream.write("\r" + line.ljust(100)[:100])
            self.drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.last = now

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
