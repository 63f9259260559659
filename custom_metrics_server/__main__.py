"""`python -m custom_metrics_server` runs the command line."""

import sys

from custom_metrics_server.cli import main

sys.exit(main())
