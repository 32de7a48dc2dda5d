"""Jobs: submit, read, list and cancel, the submit-time policy check and job views."""
