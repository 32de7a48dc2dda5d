"""The executor's bootstrap: how it reads AWS_LAMBDA_RUNTIME_API."""

from __future__ import annotations

from cordum_local_executor.bootstrap import split_runtime_api


def test_bootstrap_splits_the_runtime_api_into_address_and_path_prefix() -> None:
    assert split_runtime_api("127.0.0.1:9001/tok_en-1") == ("127.0.0.1:9001", "/tok_en-1")
    assert split_runtime_api("127.0.0.1:9001") == ("127.0.0.1:9001", "")
    assert split_runtime_api("127.0.0.1:9001/t/") == ("127.0.0.1:9001", "/t")
