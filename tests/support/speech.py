"""Speech of known sentences for the speech tests, by espeak-ng (a Debian package that
`make install-test` installs with .ci/install-espeak). Without it a test skips on a
workstation and fails under CI (the variable CI set), so CI never passes by skipping."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def espeak() -> str:
    found = shutil.which("espeak-ng")
    if found:
        return found
    if "CI" in os.environ:
        pytest.fail("no espeak-ng on PATH under CI: `make install-test` installs it (.ci/install-espeak, apt)")
    pytest.skip("no espeak-ng on PATH (apt-get install espeak-ng)")


def spoken(text: str, out: Path, wpm: int = 150) -> Path:
    """`text` said by espeak-ng into the WAV file `out` (through the harness's own call)."""
    espeak()
    from harness.data.audio import speak

    speak(text, out, wpm=wpm)
    return out
