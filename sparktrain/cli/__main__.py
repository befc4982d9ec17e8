"""`python -m sparktrain.cli ...` = `spark ...`."""
import sys

from sparktrain.cli import main

sys.exit(main())
