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


async def ensure_stream(js: nats.js.JetStreamContext) -> str:
    """Create the job stream unless a stream already captures sys.job.submit."""
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
        )
    )
    return STREAM
