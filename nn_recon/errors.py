"""The one exception type for bad input: the CLI turns it into a message and exit status 2."""


class ReconInputError(ValueError):
    """Input the user can fix (a path, a shape, an option); the message names the problem and the fix."""
