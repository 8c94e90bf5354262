import sys

from orthoplug.bench.cli import main

sys.exit(main())
