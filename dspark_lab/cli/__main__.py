"""`python -m dspark_lab.cli`: the command line, a Ctrl-C before main's own handler ending it as interrupted."""
import sys

from dspark_lab.cli.exits import EXIT_INTERRUPTED
from dspark_lab.cli.main import main

try:
    code = main()
except KeyboardInterrupt:  # a Ctrl-C that came before main's own handler, or after it
    code = EXIT_INTERRUPTED
sys.exit(code)
