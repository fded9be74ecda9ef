"""``python -m qdd.preflight layout`` (operator side) or ``serve``/``fetch`` (the GPU program)."""

import sys

if sys.argv[1:2] == ["layout"]:
    from .planned import main as layout_main

    sys.exit(layout_main(sys.argv[2:]))

from .gpu.program import main

sys.exit(main())
