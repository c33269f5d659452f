"""``python -m fl_core <analysis> ...``: see :mod:`fl_core.cli`."""

from fl_core.cli import main

raise SystemExit(main())
