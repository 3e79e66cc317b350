import sys

from dspark_lab.cli.main import main

sys.exit(main())
