"""`python -m primc`: the command line (`primc --help`)."""

import sys

from primc.cli import main

sys.exit(main())
