"""`python -m s2sgrad` is the `s2sgrad` command."""
import sys

from .cli import main

sys.exit(main())
