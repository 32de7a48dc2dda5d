"""CDK constructs of the Cordum Serverless stack, one module per concern.

The stack shares a few definitions with the code it deploys (the Redis ACL users of
``shared/cordum/redis_acl.py``), so the repository's ``shared/`` folder is made
importable here, for every entry point (app.py, costs.py, the tests).
"""

import sys
from pathlib import Path

_SHARED = str(Path(__file__).resolve().parents[3] / "shared")
if _SHARED not in sys.path:
    sys.path.append(_SHARED)
