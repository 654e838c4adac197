"""One exception type for bad user input, so the CLI can print it as a one-line error and exit non-zero."""


class R2AInputError(ValueError):
    """Bad input from the user: a missing or malformed file, an unknown name, a wrong array shape.

    The message names the file/field and what was expected; the CLI prints it on one line.
    """
