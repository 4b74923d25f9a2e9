import sys

from skel.cli import main

sys.exit(main())
