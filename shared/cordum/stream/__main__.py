"""``python -m cordum.stream``: one replica of cordum-stream (``cordum.stream.service``)."""

from cordum.stream.service import main

main()
