"""``python -m r2a_cli ...`` is ``r2a ...`` (also under ``torchrun -m r2a_cli gate train ...``)."""

import sys

from r2a_cli.main import main

sys.exit(main())
