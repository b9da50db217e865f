"""Helpers dpa's own modules share; not part of the public API (names here may change)."""
