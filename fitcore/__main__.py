import sys

from fitcore.cli import main

sys.exit(main())
