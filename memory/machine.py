"""What was measured or built on this machine: forward-pass cost curves and trained Medusa heads.

Each curve (target, hardware, dtype) and each target's heads is one row, written on its own with
INSERT OR REPLACE, so two processes saving different ones never lose each other's row. Before
migrations m007/m008 they were whole dicts in the onboarding answers ``cost_curve`` and
``medusa_heads``; ``Store.get_answer``/``save_answer`` still accept those two keys and map them
onto these tables row by row (see :meth:`MachineMixin._legacy_answer`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memory.helpers import require_text
from memory.migrations import (LEGACY_COST_CURVE_KEY, LEGACY_HEADS_KEY, cost_curve_rows, encode_curve,
                               trained_heads_rows, utc_now)
from tools.errors import ParameterError

LEGACY_KEYS = (LEGACY_COST_CURVE_KEY, LEGACY_HEADS_KEY)
ANY_KERNELS = "any"  # get_cost_curve: whatever kernels the curve was timed with


def _decode_curve(row: dict) -> dict:
    """A ``cost_curves`` row with its curve as ``{tokens (int): seconds (float)}``."""
    return {**row, "curve": {int(n): float(t) for n, t in json.loads(row["curve"]).items()}}


class MachineMixin:
    """Store methods for the ``cost_curves`` and ``trained_heads`` tables (uses ``_write``, ``_rows``)."""

    # ---- forward-pass cost curves ------------------------------------------------------------

    def save_cost_curve(self, target: str, hardware: str, curve: dict, dtype: str,
                        measured_at: str | None = None, kernels: str | None = None) -> dict:
        """Save (or replace) the cost curve ``{tokens: seconds}`` of ``target`` on ``hardware`` in
        ``dtype``, measured now unless ``measured_at`` is given, timed with ``kernels`` (None: the engine's
        own; tools.engine.cpu_gemm.kernels); return it as :meth:`get_cost_curve` does."""
        require_text("target", target)
        require_text("hardware", hardware)
        dtype = require_text("dtype", str(dtype).replace("torch.", "") if dtype is not None else None)
        try:
            curve_json = encode_curve(curve)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ParameterError(f"not a cost curve: {exc}",
                                 hint="give {tokens: seconds}, e.g. {1: 0.11, 2: 0.112}") from None
        row = {"target": target, "hardware": hardware, "dtype": dtype, "curve": curve_json,
               "measured_at": measured_at or utc_now(), "kernels": kernels}
        with self._write() as db:
            db["cost_curves"].insert(row, replace=True)
        return _decode_curve(row)

    def get_cost_curve(self, target: str, hardware: str, dtype: str | None = None,
                       kernels: str | None = ANY_KERNELS) -> dict | None:
        """The newest cost curve of ``target`` on ``hardware`` (in ``dtype`` if given; timed with ``kernels``
        if given, None meaning the engine's own), or ``None``:
        ``{"target", "hardware", "dtype", "curve": {tokens: seconds}, "measured_at", "kernels"}``."""
        sql, params = "select * from cost_curves where target = ? and hardware = ?", [target, hardware]
        if dtype is not None:
            sql, params = sql + " and dtype = ?", [*params, str(dtype).replace("torch.", "")]
        if kernels != ANY_KERNELS:
            sql, params = sql + " and kernels is ?", [*params, kernels]
        rows = self._rows(sql + " order by measured_at desc limit 1", params)
        return _decode_curve(rows[0]) if rows else None

    def cost_curves(self) -> list[dict]:
        """Every stored cost curve, newest first."""
        return [_decode_curve(r) for r in self._rows("select * from cost_curves order by measured_at desc")]

    # ---- trained Medusa heads ----------------------------------------------------------------

    def save_trained_heads(self, target: str, path: str | Path) -> None:
        """Record (or replace) the folder of the Medusa heads trained for ``target``."""
        require_text("target", target)
        path = require_text("path", str(path) if path is not None else None)
        with self._write() as db:
            db["trained_heads"].insert({"target": target, "path": path, "trained_at": utc_now()}, replace=True)

    def trained_heads_path(self, target: str) -> str | None:
        """The folder recorded for the heads trained for ``target``, or ``None`` (not checked on disk)."""
        rows = self._rows("select path from trained_heads where target = ?", [target])
        return rows[0]["path"] if rows else None

    def all_trained_heads(self) -> dict[str, str]:
        """Every recorded heads folder, as ``{target: folder}``."""
        return {r["target"]: r["path"] for r in self._rows("select target, path from trained_heads order by target")}

    # ---- the legacy onboarding answers ``cost_curve`` and ``medusa_heads`` -------------------

    def _legacy_answer(self, key: str) -> dict | None:
        """The old whole-dict form of a legacy key, built from the table rows (``None`` when empty)."""
        if key == LEGACY_HEADS_KEY:
            return self.all_trained_heads() or None
        out: dict[str, Any] = {}
        for row in reversed(self.cost_curves()):  # oldest first: the newest dtype of a target|hardware wins
            out[f"{row['target']}|{row['hardware']}"] = {
                "curve": {str(n): t for n, t in row["curve"].items()}, "dtype": row["dtype"],
                "measured_at": row["measured_at"], "hardware": row["hardware"]}
        return out or None

    def _save_legacy_answer(self, key: str, value: Any) -> None:
        """Save the old whole-dict form of a legacy key entry by entry, without deleting any row.

        Old callers read the dict, add an entry and save it back; writing every entry as a row
        keeps what another process saved meanwhile. A cost curve replaces a stored one only if it
        was measured at the same time or later, and a heads folder only if the folder changed, so a
        stale copy of the dict does not undo a newer save.
        """
        to_rows = cost_curve_rows if key == LEGACY_COST_CURVE_KEY else trained_heads_rows
        rows, skipped = to_rows(value, utc_now())
        if skipped:
            raise ParameterError(f"cannot store {', '.join(skipped)} under {key!r}",
                                 hint="use Store.save_cost_curve / save_trained_heads")
        with self._write() as db:
            for row in rows:
                if key == LEGACY_COST_CURVE_KEY:
                    db.execute("insert into cost_curves (target, hardware, dtype, curve, measured_at) "
                               "values (:target, :hardware, :dtype, :curve, :measured_at) "
                               "on conflict (target, hardware, dtype) do update set curve = excluded.curve, "
                               "measured_at = excluded.measured_at "
                               "where excluded.measured_at >= cost_curves.measured_at", row)
                else:
                    db.execute("insert into trained_heads (target, path, trained_at) "
                               "values (:target, :path, :trained_at) on conflict (target) do update set "
                               "path = excluded.path, trained_at = excluded.trained_at "
                               "where excluded.path != trained_heads.path", row)
