"""The live event stream's place in the API's document: its two paths are served by
cordum-stream (cordum.stream), not by the REST API, and documented here."""
