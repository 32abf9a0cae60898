"""``python -m xjobs.cli`` is ``xjobsd``."""

import sys

from . import main

sys.exit(main())
