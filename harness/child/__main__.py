"""`python -m harness.child RUN_DIR`: one LoadGen test in this process (harness.child.main)."""

import sys

from harness.child.main import main

sys.exit(main(sys.argv[1:]))
