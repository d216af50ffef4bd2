"""What every ``pathways-chaos`` command does with an error it can name: one line on stderr,
saying which command speaks and what was wrong, and the exit code the error means; never a
traceback. One home, so no command words (or escapes) its errors differently."""

from __future__ import annotations

import sys
from collections.abc import Callable

from pathways_chaos.harness.engine.untrusted_files import shown
from pathways_chaos.harness.errors import ChaosError


def one_line(error: BaseException) -> str:
    """``error`` as one line: a message of ours as it is worded, an ``OSError`` as the file it
    names (escaped, shortened) and the system's reason."""
    if isinstance(error, OSError) and not isinstance(error, ChaosError):  # ChaosRefused is one
        where = f" {shown(error.filename)}:" if error.filename else ""
        return f"{where} {error.strerror or error}".lstrip()
    return shown(error, limit=2000)


def reported(prog: str, command: Callable[[], int]) -> int:
    """Runs ``command``; a ``ChaosError`` (its own exit code) or an ``OSError`` nothing checked
    for (2: a folder given as a file, a file that cannot be read) ends it in one line."""
    try:
        return command()
    except ChaosError as error:
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
        return error.exit_code
    except OSError as error:
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
        return 2
