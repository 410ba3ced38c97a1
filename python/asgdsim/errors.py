"""asgdsim.errors — the exceptions the package raises.

Each carries what the command line would say and do: `message` (the text `asgdsim`
prints after "asgdsim: "), `exit_code` (2 invalid input, 1 any other failure), and for an
invalid config every issue as (JSON path, message) in `issues`.
"""


class AsgdsimError(Exception):
    """An error from asgdsim: `message`, `exit_code`, `issues` ((path, message) pairs)."""

    def __init__(self, message, exit_code=1, issues=()):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.issues = [tuple(i) for i in issues]


class InputError(AsgdsimError, ValueError):
    """Invalid input (exit code 2): usage, data, files, a folder in use."""


class ConfigError(InputError):
    """An invalid config: `issues` holds every problem found, each (JSON path, message)."""


class RunError(AsgdsimError, RuntimeError):
    """A run failed for another reason (exit code 1): the model raised, out of memory, ..."""


class ModelError(InputError):
    """The user's model or data breaks the gradient contract (docs/python.md): a gradient
    of the wrong size, a parameter count that changes, a dataset shorter than it says.
    Raised inside a job, it fails the run as invalid input (exit code 2)."""

    def __init__(self, message, exit_code=2, issues=()):
        super().__init__(message, exit_code, issues)
