"""The specpilot memory: one SQLite database with append-only migrations and one Store class."""

from memory.store import ApprovalError, Store, database_path, home_dir, settings_key

__all__ = ["ApprovalError", "Store", "database_path", "home_dir", "settings_key"]
