"""``python -m cosim.adapters.roofline.fit``: refit the roofline's default (see the package docstring)."""

import sys

from . import main

sys.exit(main())
