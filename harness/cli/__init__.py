"""The command line: thin click commands over the library (harness.cli.main holds the group)."""

from harness.cli.main import main

__all__ = ["main"]
