"""Shared test helpers (no services here: see tests/integration/conftest.py)."""
