"""``python -m registry.cli``: the ``ladd`` command."""
import sys

from registry.cli import main

sys.exit(main())
