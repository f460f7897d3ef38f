"""Test doubles shared by the unit tests (no services)."""
