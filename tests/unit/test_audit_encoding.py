"""The audit chain's canonical event encoding, keys and the pure verifier (no Redis)."""

from __future__ import annotations

import json

import pytest

from cordum.store.audit import (
    MAX_EVENT_BYTES,
    AuditChain,
    AuditEncodingError,
    AuditEntry,
    AuditEvent,
    Severity,
    audit_keys,
    canonical_json,
    decode_event,
    encode_event,
    entry_hash,
    entry_hmac,
    event_digest,
    hashed_bytes,
    head_key,
    parse_head,
    stream_key,
    validate_tenant,
    with_audit,
)
from cordum.store.audit_verify import verify_entries


def event(**over: object) -> AuditEvent:
    base: dict[str, object] = dict(type="approval.approve", severity="HIGH", tenant="acme",
                                   actor="alice", actor_key="key-1", at=1_700_000_000_000_000)
    base.update(over)
    return AuditEvent(**base)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- encoding


def test_an_event_encodes_sorted_compact_and_without_optional_fields_left_none():
    data = encode_event(event(job_id="job-1"))
    assert data == (b'{"actor":"alice","actor_key":"key-1","at":1700000000000000,'
                    b'"job_id":"job-1","severity":"HIGH","tenant":"acme",'
                    b'"type":"approval.approve"}')
    assert decode_event(data)["job_id"] == "job-1"


def test_nested_objects_are_sorted_at_every_level_and_text_stays_utf8():
    extra = {"z": 1, "a": {"y": [3, {"b": 0, "a": None}]}}
    data = encode_event(event(reason="größe ✓", extra=extra, snapshot={"k": True}))
    text = data.decode("utf-8")
    assert '"reason":"größe ✓"' in text
    assert '"extra":{"a":{"y":[3,{"a":null,"b":0}]},"z":1}' in text
    assert '"snapshot":{"k":true}' in text
    assert json.loads(data)["reason"] == "größe ✓"


def test_keys_sort_by_utf16_code_units_as_rfc_8785_does():
    # U+1F600 is D83D DE00 in UTF-16, below U+FF5E: by code point it would come after.
    assert canonical_json({"\uff5e": 1, "\U0001f600": 2}) == (
        '{"\U0001f600":2,"\uff5e":1}'.encode())


def test_control_characters_are_escaped_the_json_way():
    assert canonical_json("a\nb\u0001\t\"\\") == b'"a\\nb\\u0001\\t\\"\\\\"'


def test_the_encoding_is_stable_whatever_the_insertion_order():
    one = encode_event(event(extra={"b": 1, "a": 2}))
    two = encode_event(event(extra={"a": 2, "b": 1}))
    assert one == two


@pytest.mark.parametrize("value", [1.5, 1.0, float("nan"), float("inf")])
def test_floats_are_refused_with_a_clear_error(value):
    with pytest.raises(AuditEncodingError, match="float"):
        encode_event(event(extra={"n": value}))


@pytest.mark.parametrize("value", [2**53, -(2**53)])
def test_integers_past_2_53_are_refused(value):
    with pytest.raises(AuditEncodingError, match="2\\^53"):
        canonical_json({"n": value})


def test_integers_up_to_2_53_minus_1_pass():
    assert canonical_json([2**53 - 1, -(2**53 - 1)]) == b"[9007199254740991,-9007199254740991]"


@pytest.mark.parametrize("value", [{1: "a"}, {"a": {2: "b"}}, {"s": {1, 2}}, {"b": b"x"},
                                   {"t": "\ud800"}])
def test_values_outside_the_json_subset_are_refused(value):
    with pytest.raises(AuditEncodingError):
        canonical_json(value)


def test_an_event_over_16_kib_is_refused_and_one_at_the_bound_passes():
    empty = len(encode_event(event(reason="")))
    assert len(encode_event(event(reason="x" * (MAX_EVENT_BYTES - empty)))) == MAX_EVENT_BYTES
    with pytest.raises(AuditEncodingError, match="over 16384"):
        encode_event(event(reason="x" * (MAX_EVENT_BYTES - empty + 1)))


@pytest.mark.parametrize("over", [dict(type=""), dict(type="a b"), dict(severity="LOUD"),
                                  dict(at=-1), dict(at=True), dict(at=1.0), dict(actor=None),
                                  dict(job_id=7), dict(extra=[1]), dict(tenant="")])
def test_an_event_checks_its_fields(over):
    with pytest.raises(ValueError):
        event(**over)


def test_severity_takes_the_enum_or_its_name():
    assert event(severity=Severity.CRITICAL).severity is Severity.CRITICAL
    assert event(severity="INFO").severity is Severity.INFO


# --------------------------------------------------------------------------- keys


def test_stream_and_head_keys_never_collide_across_tenants():
    assert stream_key("acme") == "audit:chain:acme"
    assert head_key("acme") == "audit:head:acme"
    assert audit_keys("acme") == ["audit:chain:acme", "audit:head:acme"]
    tenants = ["acme", "head:acme", "chain:acme", "audit:head:acme", "x"]
    streams = {stream_key(t) for t in tenants}
    heads = {head_key(t) for t in tenants}
    assert not streams & heads


@pytest.mark.parametrize("tenant", ["", " ", "a b", "a\tb", "a\nb", "a\x00b", "a\u200bb",
                                    "x" * 257])
def test_tenant_names_with_whitespace_or_control_characters_are_refused(tenant):
    with pytest.raises(ValueError):
        validate_tenant(tenant)


def test_tenant_names_may_hold_colons_dots_and_unicode():
    for tenant in ("acme", "acme:eu", "a.b-c_d", "münchen"):
        assert validate_tenant(tenant) == tenant


def test_parse_head():
    h = "a" * 64
    assert parse_head(None) is None
    assert parse_head(f"12:{h}".encode()) == (12, h)
    for bad in ("12", "x:" + h, "12:abc", ""):
        with pytest.raises(ValueError):
            parse_head(bad)


def test_with_audit_puts_the_library_before_the_body():
    source = with_audit("return 1")
    assert source.index("audit_append = function") < source.index("return 1")
    assert source.rstrip().endswith("return 1")


# --------------------------------------------------------------------------- the formula


def test_entry_hash_is_sha256_of_prev_seq_and_the_events_digest_on_lines():
    import hashlib
    import hmac

    prev = "b" * 64
    digest = hashlib.sha256(b"{}").hexdigest()
    assert event_digest(b"{}") == digest
    assert entry_hash(prev, 7, b"{}") == hashlib.sha256(
        f"{prev}\n7\n{digest}".encode()).hexdigest()
    assert entry_hmac(b"k", "", 1, b"{}") == hmac.new(
        b"k", f"\n1\n{digest}".encode(), "sha256").hexdigest()
    # A fixed number of bytes is hashed whatever the event's size.
    assert len(hashed_bytes(prev, 7, b"x" * MAX_EVENT_BYTES)) == len(hashed_bytes(prev, 7, b"{}"))


def test_script_args_are_the_event_its_digest_and_the_key():
    import hashlib

    class Redis:
        def register_script(self, source: str) -> object:
            return object()

    data = encode_event(event())
    assert AuditChain(Redis(), b"key").script_args(event()) == [
        data, hashlib.sha256(data).hexdigest().encode(), b"key"]
    assert AuditChain(Redis()).script_args(data)[2] == b""
    with pytest.raises(AuditEncodingError):
        AuditChain(Redis()).script_args(b"")


# --------------------------------------------------------------------------- the pure verifier


def chain(n: int, key: bytes | None = None, tenant: str = "acme") -> list[AuditEntry]:
    out, prev = [], ""
    for seq in range(1, n + 1):
        data = encode_event(event(tenant=tenant, at=seq, reason=f"act {seq}"))
        digest = entry_hash(prev, seq, data)
        out.append(AuditEntry(f"{seq}-1", str(seq), prev, digest,
                              entry_hmac(key, prev, seq, data) if key else "", data))
        prev = digest
    return out


def head_of(entries: list[AuditEntry]) -> tuple[int, str]:
    return int(entries[-1].seq), entries[-1].hash


def gaps(result) -> list[tuple[int, str]]:
    return [(g.at_seq, g.type) for g in result.gaps]


def test_an_untouched_chain_verifies_ok():
    entries = chain(5, b"k")
    result = verify_entries(entries, head_of(entries), hmac_key=b"k")
    assert result.as_dict() == {"status": "ok", "total_events": 5, "verified_events": 5,
                                "first_seq": 1, "last_seq": 5, "gaps": [],
                                "hmac_verified": True, "gaps_truncated": False}


def test_an_empty_chain_with_no_head_is_ok():
    result = verify_entries([], None)
    assert (result.status, result.total_events, result.last_seq) == ("ok", 0, 0)


def test_edited_event_at_seq_3_is_a_hash_mismatch_at_3():
    entries = chain(5)
    e = entries[2]
    entries[2] = AuditEntry(e.stream_id, e.seq, e.prev, e.hash, e.hmac,
                            e.event.replace(b"act 3", b"act X"))
    result = verify_entries(entries, head_of(entries))
    assert result.status == "compromised"
    assert gaps(result) == [(3, "hash_mismatch")]
    assert result.verified_events == 4


def test_event_and_hash_rewritten_at_seq_3_breaks_the_link_at_4():
    entries = chain(5)
    e = entries[2]
    data = e.event.replace(b"act 3", b"act X")
    entries[2] = AuditEntry(e.stream_id, e.seq, e.prev, entry_hash(e.prev, 3, data), "", data)
    assert gaps(verify_entries(entries, head_of(chain(5)))) == [(4, "broken_link")]


def test_event_and_hash_rewritten_at_the_last_seq_5_disagree_with_the_head():
    entries = chain(5)
    head = head_of(entries)
    e = entries[4]
    data = e.event.replace(b"act 5", b"act X")
    entries[4] = AuditEntry(e.stream_id, e.seq, e.prev, entry_hash(e.prev, 5, data), "", data)
    assert gaps(verify_entries(entries, head)) == [(5, "head_mismatch")]


def test_event_and_hash_rewritten_at_seq_2_without_the_key_fail_the_hmac_at_2():
    entries = chain(4, b"k")
    e = entries[1]
    data = e.event.replace(b"act 2", b"act X")
    entries[1] = AuditEntry(e.stream_id, e.seq, e.prev, entry_hash(e.prev, 2, data), e.hmac, data)
    result = verify_entries(entries, head_of(entries), hmac_key=b"k")
    assert gaps(result) == [(2, "hmac_mismatch"), (3, "broken_link")]
    assert result.hmac_verified is False


def test_deleted_entry_at_seq_3_is_missing_at_3():
    entries = chain(5)
    head = head_of(entries)
    del entries[2]
    result = verify_entries(entries, head)
    assert result.gaps[0].as_dict() == {"at_seq": 3, "type": "missing"}
    assert len(result.gaps) == 1


def test_deleted_range_2_to_4_is_one_missing_gap_of_3():
    entries = chain(6)
    head = head_of(entries)
    del entries[1:4]
    assert verify_entries(entries, head).gaps[0].as_dict() == {
        "at_seq": 2, "type": "missing", "count": 3}


def test_deleted_prefix_seq_1_2_is_missing_without_a_seed_and_partial_with_one():
    entries = chain(5)
    head = head_of(entries)
    assert gaps(verify_entries(entries[2:], head)) == [(1, "missing")]
    seeded = verify_entries(entries[2:], head, seed=(2, entries[1].hash))
    assert (seeded.status, seeded.gaps, seeded.first_seq, seeded.total_events) == (
        "partial", (), 3, 3)


def test_a_seed_with_the_wrong_hash_breaks_the_link_at_the_first_seq_after_it():
    entries = chain(5)
    result = verify_entries(entries[2:], head_of(entries), seed=(2, "0" * 64))
    assert gaps(result) == [(3, "broken_link")]


def test_entries_at_or_below_the_seed_are_passed_over():
    entries = chain(5)
    result = verify_entries(entries, head_of(entries), seed=(2, entries[1].hash))
    assert (result.status, result.total_events, result.first_seq) == ("partial", 3, 3)


def test_deleted_tail_seq_5_is_missing_at_5_by_the_head():
    entries = chain(5)
    head = head_of(entries)
    assert gaps(verify_entries(entries[:4], head)) == [(5, "missing")]


def test_reordered_entries_3_and_4_are_named_out_of_order():
    entries = chain(5)
    # A stream rebuilt with the entries of seq 3 and 4 swapped under their own ids...
    swapped = entries[:2] + [entries[3], entries[2]] + entries[4:]
    assert gaps(verify_entries(swapped, head_of(entries))) == [(3, "out_of_order")]
    # ...or with the ids in order (3-1 holding seq 4): both are named.
    renamed = [AuditEntry(f"{i + 1}-1", e.seq, e.prev, e.hash, e.hmac, e.event)
               for i, e in enumerate(swapped)]
    assert gaps(verify_entries(renamed, head_of(entries))) == [(3, "out_of_order"),
                                                               (4, "out_of_order")]


def test_a_replayed_entry_2_is_a_duplicate():
    entries = chain(3)
    assert gaps(verify_entries(entries + [entries[1]], head_of(entries))) == [(2, "duplicate")]


def test_a_genesis_entry_with_a_prev_is_bad_genesis_at_1():
    entries = chain(2)
    e = entries[0]
    prev = "c" * 64
    forged = AuditEntry(e.stream_id, e.seq, prev, entry_hash(prev, 1, e.event), "", e.event)
    assert gaps(verify_entries([forged, entries[1]], head_of(entries))) == [
        (1, "bad_genesis"), (2, "broken_link")]


def test_another_hmac_key_fails_every_entry_from_seq_1():
    entries = chain(3, b"old")
    result = verify_entries(entries, head_of(entries), hmac_key=b"new")
    assert gaps(result) == [(1, "hmac_mismatch"), (2, "hmac_mismatch"), (3, "hmac_mismatch")]
    assert (result.hmac_verified, result.verified_events) == (False, 0)


def test_entries_without_an_hmac_under_a_configured_key_are_hmac_missing_at_1():
    entries = chain(2)
    result = verify_entries(entries, head_of(entries), hmac_key=b"k")
    assert gaps(result) == [(1, "hmac_missing"), (2, "hmac_missing")]


def test_without_a_key_the_hmac_is_not_judged():
    entries = chain(2, b"k")
    result = verify_entries(entries, head_of(entries))
    assert (result.status, result.hmac_verified) == ("ok", False)


def test_a_deleted_head_is_head_missing_at_the_last_seq_3():
    entries = chain(3)
    assert gaps(verify_entries(entries, None)) == [(3, "head_missing")]


def test_a_stale_head_at_2_is_a_head_mismatch():
    entries = chain(3)
    assert gaps(verify_entries(entries, (2, entries[1].hash))) == [(3, "head_mismatch")]


def test_a_malformed_entry_at_seq_2_is_named():
    entries = chain(3)
    e = entries[1]
    entries[1] = AuditEntry(e.stream_id, e.seq, e.prev, "nothex", e.hmac, e.event)
    # Entry 3 links to a hash that cannot be read: its link fails too.
    assert gaps(verify_entries(entries, head_of(entries))) == [(2, "malformed"),
                                                               (3, "broken_link")]


def test_a_malformed_head_is_a_head_mismatch():
    entries = chain(2)
    assert gaps(verify_entries(entries, (-1, "junk"))) == [(2, "head_mismatch")]
