"""`python -m shared.cli`: the `spotjobs` console script without the installed wrapper."""

import sys

from shared.cli import main

sys.exit(main())
