"""JetStream stream and consumer layout shared by the gateway and the bridge."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum.protocol import SUBJECT_CANCEL, SUBJECT_RESULT, SUBJECT_SUBMIT

if TYPE_CHECKING:
    import nats.js

STREAM = "CORDUM_JOBS"
"""Captures every publish on the job subjects, plain NATS publishes included."""
SUBJECTS = (SUBJECT_SUBMIT, SUBJECT_RESULT, SUBJECT_CANCEL)
STREAM_MAX_AGE_S = 7 * 24 * 3600
DUPLICATE_WINDOW_S = 120
"""A re-published job id (Nats-Msg-Id) inside this window is stored once."""


async def ensure_stream(js: nats.js.JetStreamContext, *, replicas: int = 1) -> str:
    """Create the job stream unless a stream already captures sys.job.submit.

    `replicas`: copies JetStream keeps of each message (a three-node cluster: 3, so a
    node lost loses no job). A stream found already is left as it is: changing its
    replicas is an operator's ``nats stream edit``, not a start-up side effect.
    """
    from nats.js.api import RetentionPolicy, StreamConfig
    from nats.js.errors import NotFoundError

    try:
        return await js.find_stream_name_by_subject(SUBJECT_SUBMIT)
    except NotFoundError:
        pass
    await js.add_stream(
        StreamConfig(
            name=STREAM,
            subjects=list(SUBJECTS),
            retention=RetentionPolicy.WORK_QUEUE,
            max_age=STREAM_MAX_AGE_S,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=replicas,
        )
    )
    return STREAM
