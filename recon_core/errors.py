"""The one exception type for a user's mistake, and the checks that raise it for numeric options.

A :class:`ReconError` is input the user can fix (a path, a shape, an option, a model the attack
cannot read); its message names the problem and the fix. Both command-line tools turn it into a
one-line message and exit status 2; any other exception is a bug and keeps its traceback.

The configs check their fields with :func:`require_at_least` and :func:`require_positive` in
``__post_init__``, so a library call and the command line refuse the same values with the same
message, naming the option as its command-line flag (``max_steps`` is ``--max-steps``).
"""

from __future__ import annotations

import math


class ReconError(ValueError):
    """Input the user can fix; the message names the problem and the fix. The CLIs exit with status 2."""


def _require(name: str, value: float, holds: bool, rule: str) -> None:
    flag = "--" + name.replace("_", "-")
    if not math.isfinite(value):
        raise ReconError(f"{flag} must be a finite number, got {value}")
    if not holds:
        raise ReconError(f"{flag} must be {rule}, got {value}")


def require_at_least(minimum: float, **options: float) -> None:
    """Refuse the first option below ``minimum``, NaN or infinite."""
    for name, value in options.items():
        _require(name, value, value >= minimum, f"at least {minimum}")


def require_positive(**options: float) -> None:
    """Refuse the first option that is not a finite number above 0."""
    for name, value in options.items():
        _require(name, value, value > 0, "above 0")
