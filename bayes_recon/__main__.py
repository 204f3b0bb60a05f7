"""``python -m bayes_recon``: the ``bayes-recon`` command."""

import sys

from bayes_recon.cli import main

sys.exit(main())
