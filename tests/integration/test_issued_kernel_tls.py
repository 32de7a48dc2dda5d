"""The certificate the AWS stack issues for its kernel, over real gRPC: the kernel
takes it from its variables as ECS hands them over, the clients verify it with the
CA from theirs, as the functions get it."""

from __future__ import annotations

import pytest

from cordum.config import ConfigError
from cordum.safety.client import Decision, SafetyClient
from cordum.safety.kernel_pki import issue
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.policy_file import Policy
from cordum.safety.tls import client_tls_from_env, server_tls_from_env
from tests.helpers import SHIPPED_POLICY, serving_kernel
from tests.integration.test_safety_tls import check


@pytest.fixture(scope="module")
def issued():
    return issue("localhost")


@pytest.fixture
def kernel(issued):
    tls = server_tls_from_env({"SAFETY_KERNEL_TLS_CERT": issued.cert_pem,
                               "SAFETY_KERNEL_TLS_KEY": issued.key_pem})
    with serving_kernel(PolicyKernel(Policy(SHIPPED_POLICY)), tls=tls) as addr:
        # The name the certificate was issued for
        yield addr.replace("127.0.0.1", "localhost")


def test_a_client_with_the_issued_ca_gets_decisions(aloop, issued, kernel):
    env = {"SAFETY_KERNEL_TLS_CA": issued.ca_pem, "SAFETY_KERNEL_TLS_REQUIRED": "true"}
    client = SafetyClient(kernel, 2.0, tls=client_tls_from_env(env))
    assert check(aloop, client).decision is Decision.ALLOW


def test_a_client_trusting_another_issue_is_refused(aloop, kernel):
    other = issue("localhost")
    client = SafetyClient(kernel, 1.0, tls=client_tls_from_env(
        {"SAFETY_KERNEL_TLS_CA": other.ca_pem, "SAFETY_KERNEL_TLS_REQUIRED": "true"}))
    assert check(aloop, client).decision is Decision.UNAVAILABLE


def test_pem_text_of_the_wrong_kind_is_a_config_error_that_does_not_echo_it(issued):
    with pytest.raises(ConfigError) as raised:
        server_tls_from_env({"SAFETY_KERNEL_TLS_CERT": issued.key_pem,
                             "SAFETY_KERNEL_TLS_KEY": issued.key_pem})
    assert str(raised.value) == "SAFETY_KERNEL_TLS_CERT: holds no PEM certificate"
