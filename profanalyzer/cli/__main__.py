"""``python -m profanalyzer.cli`` is ``profanalyze``."""

import sys

from profanalyzer.cli import main

sys.exit(main())
