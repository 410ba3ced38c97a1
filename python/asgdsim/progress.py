"""asgdsim.progress — ready-made progress= callbacks for asgdsim.run.

asgdsim.run(..., progress="bar") shows one bar per run: a tqdm bar (tqdm.auto: a widget in
a Jupyter notebook, text elsewhere) when tqdm is installed (Debian's python3-tqdm), else a
text line each time the run passes another tenth of its stop budget. Each bar goes from 0
to 1 (the fraction of the stop budget: stop.updates, stop.time, ... whichever is nearest)
and shows the run's train loss and, at its end, its status. Bar() is the same object, to
pass where a callable is wanted or to write elsewhere than stderr.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Dict, Optional, TextIO

__all__ = ["Bar"]


def _tqdm():
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class Bar:
    """A progress= callback drawing one bar per run (module docstring). file: where the
    bars or lines go (default sys.stderr); plain=True draws text lines even where tqdm is
    installed."""

    def __init__(self, file: Optional[TextIO] = None, plain: bool = False):
        self._file = file
        self._tqdm = None if plain else _tqdm()
        self._bars: Dict[str, Any] = {}
        self._tenths: Dict[str, int] = {}
        self._lock = threading.Lock()  # runs side by side (jobs > 1) report on their own threads

    @property
    def uses_tqdm(self) -> bool:
        return self._tqdm is not None

    def __call__(self, event: Dict[str, Any]) -> None:
        with self._lock:
            if self._tqdm is not None:
                self._draw_bar(event)
            else:
                self._write_line(event)

    def _out(self) -> TextIO:
        return self._file if self._file is not None else sys.stderr

    def _label(self, event: Dict[str, Any]) -> str:
        return f"[{event['run'] + 1}/{event['runs']}] {event['run_id']}"

    def _draw_bar(self, event: Dict[str, Any]) -> None:
        run_id = event["run_id"]
        bar = self._bars.get(run_id)
        if bar is None:
            bar = self._tqdm(total=1.0, desc=self._label(event), file=self._out(), leave=True,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}{postfix}")
            self._bars[run_id] = bar
        bar.n = min(max(float(event["fraction"]), 0.0), 1.0)
        post = f"train_loss {event['train_loss']:.4g}"
        if event["status"]:
            post += f", {event['status']}"
        bar.set_postfix_str(post, refresh=False)
        bar.refresh()
        if event["status"]:
            bar.close()
            del self._bars[run_id]

    def _write_line(self, event: Dict[str, Any]) -> None:
        run_id = event["run_id"]
        tenth = int(min(max(float(event["fraction"]), 0.0), 1.0) * 10)
        if not event["status"] and tenth <= self._tenths.get(run_id, -1):
            return
        self._tenths[run_id] = tenth
        line = (f"{self._label(event)}: {100 * float(event['fraction']):3.0f}%, updates {event['updates']}, "
                f"train_loss {event['train_loss']:.4g}")
        if event["status"]:
            line += f", {event['status']}"
            self._tenths.pop(run_id, None)
        print(line, file=self._out(), flush=True)
