"""``python -m cli``: the ``placer`` command (torchrun starts it this way)."""

import sys

from cli import main

sys.exit(main())
