"""pydantic's plugin discovery is not imported when its plugins are all turned off
(cordum/__init__.py): the functions build their models as before, with no plugin, and
without importlib.metadata. Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import cordum.config
from pydantic import BaseModel
from pydantic.plugin._schema_validator import create_schema_validator
class Job(BaseModel):
    n: int
loader = sys.modules["pydantic.plugin._loader"]
print(json.dumps({"ours": not hasattr(loader, "PYDANTIC_ENTRY_POINT_GROUP"),
                  "plugins": list(loader.get_plugins()), "n": Job(n="3").n,
                  "metadata": "importlib.metadata" in sys.modules}))
"""


def probe(**env: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "shared"),
                              **env}, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("value", ["1", "true", "__all__"])
def test_with_every_plugin_off_the_discovery_is_not_imported(value: str) -> None:
    assert probe(PYDANTIC_DISABLE_PLUGINS=value) == {
        "ours": True, "plugins": [], "n": 3, "metadata": False}


@pytest.mark.parametrize("env", [{}, {"PYDANTIC_DISABLE_PLUGINS": "logfire"}])
def test_otherwise_pydantic_looks_for_its_plugins(env: dict[str, str]) -> None:
    seen = probe(**env)
    assert seen["ours"] is False and seen["metadata"] is True and seen["n"] == 3


def test_the_loader_is_where_pydantic_imports_it_from() -> None:
    """A pydantic release that moved its loader would load the real one beside ours."""
    import pydantic.plugin._schema_validator as validator

    assert "from ._loader import get_plugins" in Path(validator.__file__).read_text()
