"""The labels under which the safety client describes a job's payload to the kernel.

Only the client sets them (labels under the prefix that came with a job are dropped);
the kernel's risk tag derivers (:mod:`cordum.safety.risk`) read them. A module of
their own: the client needs these names, not the derivers' policy models.
"""

from __future__ import annotations

PAYLOAD_JSON_LABEL = "_content.payload_json"
PROMPT_LABEL = "_content.prompt"
CONTENT_LABEL_PREFIX = "_content."
"""Labels under this prefix describe the payload; only the safety client sets them."""
