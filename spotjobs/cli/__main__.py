"""`python -m spotjobs.cli`: the `spotjobs` console script without the installed wrapper."""

import sys

from spotjobs.cli import main

sys.exit(main())
