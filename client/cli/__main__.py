"""``python -m client.cli``: the ``placer`` command (torchrun starts it this way)."""

import sys

from client.cli import main

sys.exit(main())
