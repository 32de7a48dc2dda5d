"""Write the gateway's OpenAPI document to a file: ``python -m cordum.gateway.docs PATH``.

The dashboard's build (dashboard/build.py) generates its API types from this
file, so a changed route or answer breaks the dashboard's type check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cordum.gateway.app  # noqa: F401  (publishes the features' API parts)
from cordum.gateway.docs import openapi


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m cordum.gateway.docs PATH", file=sys.stderr)
        return 2
    Path(argv[0]).write_text(json.dumps(openapi.document(), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
