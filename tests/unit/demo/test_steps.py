"""pos_lambda_dev.demo.steps helpers that need no services."""

from __future__ import annotations

import os
import signal

import pytest

from pos_lambda_dev.demo.steps import interrupt_on_sigterm


def test_sigterm_interrupts_like_ctrl_c_so_cleanup_runs() -> None:
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    try:
        interrupt_on_sigterm()
        with pytest.raises(KeyboardInterrupt):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            finally:
                cleaned.append("stopped what it started")
    finally:
        signal.signal(signal.SIGTERM, before)
    assert cleaned == ["stopped what it started"]
