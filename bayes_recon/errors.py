"""One exception type for bad input: its message names the problem and the fix."""


class ReconError(ValueError):
    """Raised for input the attack cannot use; the CLI prints the message and exits with status 2."""
