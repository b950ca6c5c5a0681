"""What every command shares: the consoles and the mapping of errors to one line and an exit code.

The exit codes are the table in harness.errors: a HarnessError exits with its own code; any
other exception is a bug of the tool, never a verdict, and exits EXIT_INTERNAL with one line
(its traceback under --debug), so "a gate fired" (1) and "the tool crashed" stay apart.
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from harness.errors import EXIT_INTERNAL, HarnessError

console = Console()
err_console = Console(stderr=True)


def _say(message: str) -> None:
    # escape: messages hold text like "pip install 'loadgen-harness[pytorch]'" that rich
    # would otherwise read as markup and silently drop.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def debug_enabled() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().params.get("debug", False))


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = debug_enabled()
        try:
            return fn(*args, **kwargs)
        except HarnessError as e:
            if debug:
                child_tb = getattr(e, "child_traceback", None)
                if child_tb:
                    err_console.print("traceback in the child process:", highlight=False)
                    err_console.print(escape(child_tb), highlight=False, soft_wrap=True)
                traceback.print_exc()
            _say(str(e))
            sys.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as e:  # noqa: BLE001 - a bug of the tool: one line and its own code
            if debug:
                traceback.print_exc()
            _say(f"internal error: {type(e).__name__}: {e} (a bug in the harness; --debug shows the traceback)")
            sys.exit(EXIT_INTERNAL)

    return wrapper
