"""Signed page tokens: `<payload>.<mac>`, both base64url, the MAC an HMAC-SHA256 of the
payload under the serving layer's page key.

A page token carries a Cassandra paging state, which the driver hands to Cassandra as
is: a forged one can make the server fail (ProtocolException) or the parser recurse
(a payload of 1,100 "["). So a token is verified before anything in it is parsed, and
only what this API issued is ever used.

The key: POS_SERVE_PAGE_KEY when set (every instance behind one address must share it);
otherwise one generated once into $POS_STATE_DIR/serve/page.key (mode 0600, written
whole to a temporary file and linked into place, so no reader sees it half-made), so that
`pos-serve receipts --page` and `pos-serve http` on one machine accept each other's
tokens and tokens survive a restart; otherwise (a read-only state dir) one per process.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pos_lambda.settings import Settings

log = logging.getLogger("pos.serving")

KEY_BYTES = 32
MAC_BYTES = 16  # 128 bits: forging one is out of reach; keeps tokens short
MAX_TOKEN_CHARS = 4096  # a paging state is tens of bytes; a token is far below this


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


# A token's shape, as the OpenAPI document declares it: the payload, a dot and the MAC,
# base64url without padding; or nothing (`page=`: the first page).
TOKEN_PATTERN = rf"^([A-Za-z0-9_-]+\.[A-Za-z0-9_-]{{{len(_b64(bytes(MAC_BYTES)))}}})?$"


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(payload: bytes, key: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()[:MAC_BYTES]


def sign(payload: bytes, key: bytes) -> str:
    return f"{_b64(payload)}.{_b64(_mac(payload, key))}"


def verify(token: str, key: bytes) -> bytes | None:
    """The payload of a token signed with `key`, or None for anything else."""
    if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        return None
    body, mac = token.split(".")
    try:
        payload, given = _unb64(body), _unb64(mac)
    except (ValueError, binascii.Error):
        return None
    return payload if hmac.compare_digest(given, _mac(payload, key)) else None


def page_key(settings: Settings) -> bytes:
    """The key of this process's page tokens (see the module docstring)."""
    configured = settings.serve.page_key.get_secret_value()
    if configured:
        return hashlib.sha256(configured.encode()).digest()
    path = settings.state_dir / "serve" / "page.key"
    try:
        return _stored_key(path)
    except OSError as exc:
        log.warning("page tokens: no key at %s (%s); one for this process only", path, exc)
        return os.urandom(KEY_BYTES)


KEY_WAIT_SECONDS = 2.0  # how long a reader waits for a key file another process writes


def _stored_key(
    path: Path, wait: float = KEY_WAIT_SECONDS, sleep: Callable[[float], None] = time.sleep
) -> bytes:
    """The key in `path`, made there first if there is none.

    Made whole, then linked into place: the key is written to a temporary file of its
    own, and `os.link` puts it at `path` only if nothing is there (atomic, like O_EXCL,
    but of a file already complete), so no reader ever sees a partial key from this
    code. Of two processes starting together, one link wins and both read its key.
    A file shorter than a key (one an older release was still writing between its
    exclusive create and its write) is read again for up to `wait` seconds.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd, temp = tempfile.mkstemp(prefix=".page.key.", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(KEY_BYTES))
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):  # another process linked first
                os.link(temp, path)
        finally:
            os.unlink(temp)
    waited = 0.0
    while True:
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
        if len(key) > KEY_BYTES or waited >= wait:
            raise OSError(
                f"{path} holds {len(key)} bytes, not {KEY_BYTES}: delete it and restart "
                "(one is made again), or set POS_SERVE_PAGE_KEY"
            )
        sleep(0.05)
        waited += 0.05
