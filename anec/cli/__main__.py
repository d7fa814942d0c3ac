"""``python -m anec.cli``: the ``anec`` command."""

import sys

from anec.cli import main

sys.exit(main())
