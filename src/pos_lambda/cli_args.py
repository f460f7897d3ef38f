"""argparse value types shared by the command-line tools: a bad value gets a message
that says what to fix ("must be a positive whole number, got 0"), not a traceback."""

from __future__ import annotations

import argparse
import math


def number(text: str) -> float:
    """A finite decimal number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def fraction(text: str) -> float:
    """A rate: a number from 0 to 1."""
    value = number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


def non_negative(text: str) -> float:
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def positive_int(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text}")
    return value
