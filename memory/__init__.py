"""The specpilot memory: one SQLite database with append-only migrations and one Store class.

memory imports nothing from tools/ or agent/ except tools.errors (the one definition of the
project's exception types, at the bottom layer).
"""

from memory.store import ApprovalError, Store, database_path, home_dir, settings_key

__all__ = ["ApprovalError", "Store", "database_path", "home_dir", "settings_key"]
