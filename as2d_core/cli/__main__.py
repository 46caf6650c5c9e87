"""``python -m as2d_core.cli``."""
from as2d_core.cli.main import main

main()
