"""The harness's errors, one hierarchy. The CLI turns each into one line and an exit code.

    HarnessError                 exit 2 unless stated
    ├── ConfigError              a setting is unknown, mistyped or impossible
    ├── ModelError               missing, corrupt or unsupported model
    ├── DatasetError             dataset missing, or not matching the model
    ├── BackendError             backend unavailable or failing to load
    ├── OutputError              results folder cannot be written or read
    └── RunError                 the child process failed or was killed (exit 3)
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error the harness reports to a user as one line."""

    exit_code = 2


class ConfigError(HarnessError):
    pass


class ModelError(HarnessError):
    pass


class DatasetError(HarnessError):
    pass


class BackendError(HarnessError):
    pass


class OutputError(HarnessError):
    pass


class RunError(HarnessError):
    exit_code = 3
