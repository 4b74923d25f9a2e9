"""Exit codes and the one exception type that maps to "usage or input error"."""
EXIT_OK = 0
EXIT_FINDINGS = 1  # findings, rejection, or a check that found problems in content
EXIT_USAGE = 2  # bad usage or unusable input (missing file, broken metadata, corrupt catalog)


class UsageError(Exception):
    """A problem with what the user asked for or pointed at; the message names what and where."""
