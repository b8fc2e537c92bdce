"""The approvals part of the store: a gated action runs only with an approval the user gave for
exactly its arguments, and only once.

An approval is ``pending`` until a person decides it (``approved`` or ``denied``, with who and
when); an approved one is ``consumed`` when its action runs, or ``revoked`` when a person withdraws it
before it ran. Approvals do not wait for ever: a
pending one not decided within :data:`PENDING_TTL` and an approved one not used within
:data:`APPROVED_TTL` are ``expired`` and can no longer be decided or used. Every read shows the
status as of now; every write first records the expiries that are due.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from memory.helpers import decode, dumps, require_text
from memory.migrations import utc_now
from tools.errors import ApprovalError, ParameterError

APPROVAL_STATUSES = ("pending", "approved", "denied", "consumed", "expired", "revoked")
PENDING_TTL = timedelta(minutes=15)  # a question nobody answered in this time is void
APPROVED_TTL = timedelta(minutes=60)  # an approval not used in this time is void
EXPIRY_SOURCE = {"pending": ("created_at", PENDING_TTL), "approved": ("decided_at", APPROVED_TTL)}


def expires_at(row: dict) -> str | None:
    """When the pending or approved ``row`` expires, or expired (ISO 8601 UTC); None once decided for good."""
    if row.get("status") not in ("pending", "approved", "expired"):
        return None
    column, ttl = EXPIRY_SOURCE["approved" if row.get("decided_at") else "pending"]
    try:
        return (datetime.fromisoformat(row[column]) + ttl).isoformat(timespec="microseconds")
    except (TypeError, ValueError):  # a hand-edited timestamp: treat the approval as void
        return "0000"


def with_expiry(row: dict, now: str | None = None) -> dict:
    """``row`` with its status as of ``now`` (``expired`` once its time is up) and ``expires_at``."""
    row = dict(row)
    row["expires_at"] = expires_at(row)
    if row["expires_at"] is not None and row["expires_at"] <= (now or utc_now()):
        row["status"] = "expired"
    return row


class ApprovalsMixin:
    """Store methods for the ``approvals`` table (uses the store's ``_write``, ``_rows`` and ids)."""

    def _expire_due(self, db) -> None:
        """Record as ``expired`` every pending or approved approval whose time is up (inside a write)."""
        now = datetime.now(timezone.utc)
        for status, (column, ttl) in EXPIRY_SOURCE.items():
            cutoff = (now - ttl).isoformat(timespec="microseconds")
            db.execute(f"update approvals set status = 'expired' where status = ? and {column} <= ?", [status, cutoff])

    def create_approval(self, action: str, arguments: dict, reason: str) -> str:
        """Record a pending approval for ``action`` with its exact ``arguments``; return its id."""
        require_text("action", action)
        if not isinstance(arguments, dict):
            raise ParameterError(f"arguments must be a dict, got {type(arguments).__name__}")
        with self._write() as db:
            self._expire_due(db)
            approval_id = self._new_id(self._exists_in("approvals", "id"))
            db["approvals"].insert({"id": approval_id, "created_at": utc_now(), "action": action,
                                    "arguments": dumps(arguments), "reason": reason, "status": "pending"})
        return approval_id

    def get_approval(self, approval_id: str) -> dict:
        """The approval ``approval_id`` with its arguments decoded."""
        rows = self._rows("select * from approvals where id = ?", [str(approval_id)])
        if not rows:
            raise ApprovalError(f"no approval has the id {approval_id!r}",
                                hint="ask for the action again to get a new approval id")
        return with_expiry(decode(rows[0], ("arguments",)))

    def decide_approval(self, approval_id: str, approved: bool, by: str) -> dict:
        """Approve or deny a pending approval (recording who and when); return it."""
        require_text("by", by)
        with self._write() as db:
            self._expire_due(db)
            cursor = db.execute(
                "update approvals set status = ?, decided_by = ?, decided_at = ? where id = ? and status = 'pending'",
                ["approved" if approved else "denied", by, utc_now(), str(approval_id)])
            if cursor.rowcount != 1:
                current = self.get_approval(approval_id)
                if current["status"] == "expired":
                    raise ApprovalError(f"approval {approval_id} expired at {current['expires_at']} before it "
                                        "was decided", hint="ask for the action again to get a new approval id")
                raise ApprovalError(
                    f"approval {approval_id} was already decided ({current['status']} by {current['decided_by']} "
                    f"at {current['decided_at']}); a decision cannot be changed",
                    hint="ask for the action again to get a new approval id")
        return self.get_approval(approval_id)

    def revoke_approval(self, approval_id: str, by: str) -> dict:
        """Withdraw an approved approval that has not run yet (status ``revoked``); return it. A pending one is
        denied instead. ApprovalError when it already ran, expired or was refused."""
        require_text("by", by)
        with self._write() as db:
            self._expire_due(db)
            now = utc_now()
            cursor = db.execute(
                "update approvals set status = case status when 'approved' then 'revoked' else 'denied' end, "
                "decided_by = case status when 'approved' then ? || ' (revoked; approved by ' || "
                "coalesce(decided_by, '?') || ' at ' || coalesce(decided_at, '?') || ')' else ? end, "
                "decided_at = ? where id = ? and status in ('approved', 'pending')",
                [by, by, now, str(approval_id)])
            if cursor.rowcount != 1:
                current = self.get_approval(approval_id)
                raise ApprovalError(f"approval {approval_id} is {current['status']}: there is nothing to withdraw"
                                    + (f" (it ran at {current['consumed_at']})" if current["consumed_at"] else ""),
                                    hint="an approval can be withdrawn while it is pending or approved and unused")
        return self.get_approval(approval_id)

    def consume_approval(self, approval_id: str, action: str | None = None) -> dict:
        """Use an approved approval, exactly once; return it (with the exact arguments to run).

        If ``action`` is given the approval must be for that action. A pending, denied,
        already consumed or unknown approval raises :class:`ApprovalError`.
        """
        with self._write() as db:
            self._expire_due(db)
            current = self.get_approval(approval_id)
            if action is not None and current["action"] != action:
                raise ApprovalError(f"approval {approval_id} is for {current['action']!r}, not {action!r}",
                                    hint=f"ask for approval of {action!r} itself")
            cursor = db.execute(
                "update approvals set status = 'consumed', consumed_at = ? where id = ? and status = 'approved'",
                [utc_now(), str(approval_id)])
            if cursor.rowcount != 1:
                status = current["status"]
                if status == "pending":
                    message = f"approval {approval_id} has not been approved yet"
                    hint = "the user must approve it first"
                elif status == "expired":
                    message = f"approval {approval_id} expired at {current['expires_at']} unused"
                    hint = "ask for the action again to get a new approval id"
                elif status == "denied":
                    message = f"approval {approval_id} was denied by {current['decided_by']}; the action will not run"
                    hint = "ask again if the user changes their mind"
                elif status == "revoked":
                    message = f"approval {approval_id} was withdrawn by {current['decided_by']}; the action will not run"
                    hint = "ask again if the user changes their mind"
                else:
                    message = (f"approval {approval_id} was already used at {current['consumed_at']}; "
                               "an approval runs its action once")
                    hint = "ask for a new approval to run it again"
                raise ApprovalError(message, hint=hint)
        return self.get_approval(approval_id)

    def list_approvals(self, status: str | None = None) -> list[dict]:
        """Approvals, newest first, each with its status as of now; optionally only those with ``status``."""
        if status is not None and status not in APPROVAL_STATUSES:
            raise ParameterError(f"unknown approval status {status!r}",
                                 hint=f"use one of: {', '.join(APPROVAL_STATUSES)}")
        now = utc_now()
        rows = self._rows("select * from approvals order by created_at desc, rowid desc")
        rows = [with_expiry(decode(r, ("arguments",)), now) for r in rows]
        return [r for r in rows if status is None or r["status"] == status]
