"""The instructor's side of the room: ``server`` (tornado routes), ``store`` (SQLite), ``intake`` (what a
report may be, the rate limit) and ``static/`` (the board page, served by the server itself)."""
