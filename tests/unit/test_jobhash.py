"""The approval job hash: stable under approval bookkeeping, sensitive to the job."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cordum import protocol
from cordum.approval import job_hash, same_policy


def request(**labels: str) -> protocol.JobRequest:
    req = protocol.JobRequest(job_id="j1", topic="job.default", context_ptr="redis://ctx:j1")
    req.labels.update({"foo": "bar", **labels})
    req.env["tenant_id"] = "t"
    return req


def test_approval_labels_bus_id_and_effective_config_do_not_change_the_hash():
    base = job_hash(request())
    changed = request(approval_granted="true", APPROVAL_snapshot="s|1",
                      **{"cordum.bus_msg_id": "approval:j1", "policy.attachment_id": "a"})
    changed.env["CORDUM_EFFECTIVE_CONFIG"] = '{"x":1}'
    assert job_hash(changed) == base


def test_a_changed_label_changes_the_hash():
    assert job_hash(request(foo="baz")) != job_hash(request())


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=8))
def test_label_order_never_changes_the_hash(labels):
    a, b = protocol.JobRequest(job_id="j"), protocol.JobRequest(job_id="j")
    for k, v in labels.items():
        a.labels[k] = v
    for k, v in reversed(list(labels.items())):
        b.labels[k] = v
    assert job_hash(a) == job_hash(b)


def test_an_approval_binds_the_bundles_in_force_too():
    # A bundle published after the verdict changes the policy the approval was for.
    assert same_policy("sha256:ab|cfg:1", "sha256:ab|cfg:1")
    assert not same_policy("sha256:ab|cfg:1", "sha256:ab|cfg:2")
    assert not same_policy("sha256:ab", "sha256:ab|cfg:2")
