"""Long-lived helper processes of the peers (the upstream runners, llama-server), kept while a
measurement runs: at most one per name (one model set in memory each), all closed when Python exits."""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any


class Children:
    """Processes keyed by ``(name, what it holds...)``; each value has ``proc`` (a Popen) and ``close()``."""

    def __init__(self) -> None:
        self.live: dict[tuple, Any] = {}
        atexit.register(self.close_all)

    def get(self, key: tuple, start: Callable[[], Any]) -> Any:
        """The live process for ``key``, else a new one from ``start()`` (the name's others closed first)."""
        child = self.live.get(key)
        if child is None or child.proc.poll() is not None:
            for other in [k for k in self.live if k[0] == key[0]]:
                self.live.pop(other).close()
            child = self.live[key] = start()
        return child

    def close_all(self) -> None:
        for child in self.live.values():
            child.close()
        self.live.clear()
