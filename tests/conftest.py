"""Shared test helpers (no services here: see tests/integration/conftest.py)."""

import logging

# py4j's gateway objects log "Closing down clientserver connection" at INFO from their
# finalisers, after pytest has closed its capture streams: a "--- Logging error ---"
# traceback at the very end of every run. Its warnings and errors still show.
logging.getLogger("py4j").setLevel(logging.WARNING)
