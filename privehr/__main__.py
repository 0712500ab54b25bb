import sys

from privehr.cli import main

sys.exit(main())
