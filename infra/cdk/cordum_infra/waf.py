"""The API's WAF web ACL (AWS only): a rate limit per source address and AWS's managed rules.

The stage throttle is one budget for every caller; without a limit per address,
one client (or one attacker with a stolen key, or none) takes it from every
tenant. The web ACL (REGIONAL, associated with the REST API's stage) evaluates,
in order:

1. ``RatePerSourceIp``: an address that sent more than ``wafRateLimit`` requests
   in the last RATE_WINDOW_S seconds is blocked (403) until its rate falls back.
2. ``AWSManagedRulesCommonRuleSet``: the core rules (bad bots, oversized query
   strings and cookies, path traversal, SSRF to the metadata service, ...). Its
   body rules only count: a job's body is a prompt (any text, code and HTML
   included) up to 1 MiB that the gateway validates, and the set would block any
   body over 8 KB or one that quotes a script tag.
3. ``AWSManagedRulesKnownBadInputsRuleSet``: request patterns of known exploits
   (Log4j lookups, Java deserialization, exploitable paths).

Every rule and the ACL publish CloudWatch metrics (namespace AWS/WAFV2) and keep
sampled requests. Price: $5 a month for the ACL, $1 per rule (3), $0.60 per
million requests; the two AWS rule groups are free of subscription.

LocalStack has no WAFv2: the local shape (redisUrl) creates no ACL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from cordum_infra.settings import ContextError

if TYPE_CHECKING:
    from constructs import Node

RATE_LIMIT_CONTEXT = "wafRateLimit"
"""Context key: requests per RATE_WINDOW_S one source address may send."""
RATE_WINDOW_S = 300
"""WAF's default evaluation window: the rate is counted over the last 5 minutes."""
DEFAULT_RATE_LIMIT = 15_000
"""Per address per 5 minutes: 50 requests a second on average, a tenth of the
stage's default 500, so no one address takes more than a tenth of the API; a
client polling its jobs every second uses 300."""
MIN_RATE_LIMIT = 10
MAX_RATE_LIMIT = 2_000_000_000
"""WAF's bounds for a rate-based rule's limit."""

COMMON_RULE_SET = "AWSManagedRulesCommonRuleSet"
KNOWN_BAD_INPUTS_RULE_SET = "AWSManagedRulesKnownBadInputsRuleSet"
COUNTED_BODY_RULES = (
    "SizeRestrictions_BODY",
    "CrossSiteScripting_BODY",
    "GenericLFI_BODY",
    "GenericRFI_BODY",
    "EC2MetaDataSSRF_BODY",
)
"""The common set's body rules, counted (metrics, samples) instead of blocking:
job bodies are prompts of up to 1 MiB, in which code, paths and URLs are content."""


def waf_rate_limit_from_context(node: Node) -> int:
    """The ``wafRateLimit`` context value, else DEFAULT_RATE_LIMIT."""
    value = node.try_get_context(RATE_LIMIT_CONTEXT)
    if value is None or str(value).strip() == "":
        return DEFAULT_RATE_LIMIT
    text = str(value).strip()
    if not text.isdigit() or not MIN_RATE_LIMIT <= int(text) <= MAX_RATE_LIMIT:
        raise ContextError(
            f"context {RATE_LIMIT_CONTEXT} must be a whole number of requests per 5 minutes "
            f"that one source address may send, from {MIN_RATE_LIMIT} to {MAX_RATE_LIMIT} "
            f"(default {DEFAULT_RATE_LIMIT}): {value}"
        )
    return int(text)


def _visibility(metric: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    return wafv2.CfnWebACL.VisibilityConfigProperty(
        cloud_watch_metrics_enabled=True, metric_name=metric, sampled_requests_enabled=True
    )


def _managed(
    name: str, priority: int, counted: tuple[str, ...] = ()
) -> wafv2.CfnWebACL.RuleProperty:
    overrides = [
        wafv2.CfnWebACL.RuleActionOverrideProperty(
            name=rule, action_to_use=wafv2.CfnWebACL.RuleActionProperty(count={})
        )
        for rule in counted
    ]
    return wafv2.CfnWebACL.RuleProperty(
        name=name,
        priority=priority,
        # The group's own actions apply (block), except the overrides.
        override_action=wafv2.CfnWebACL.OverrideActionProperty(none={}),
        statement=wafv2.CfnWebACL.StatementProperty(
            managed_rule_group_statement=wafv2.CfnWebACL.ManagedRuleGroupStatementProperty(
                vendor_name="AWS", name=name, rule_action_overrides=overrides or None
            )
        ),
        visibility_config=_visibility(name),
    )


class ApiWebAcl(Construct):
    """A REGIONAL web ACL with the three rules above, associated with `stage`."""

    def __init__(
        self, scope: Construct, construct_id: str, *, stage: apigateway.Stage, rate_limit: int
    ) -> None:
        super().__init__(scope, construct_id)
        rate_rule = wafv2.CfnWebACL.RuleProperty(
            name="RatePerSourceIp",
            priority=0,
            action=wafv2.CfnWebACL.RuleActionProperty(block={}),
            statement=wafv2.CfnWebACL.StatementProperty(
                rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                    limit=rate_limit, aggregate_key_type="IP", evaluation_window_sec=RATE_WINDOW_S
                )
            ),
            visibility_config=_visibility("RatePerSourceIp"),
        )
        self.acl = wafv2.CfnWebACL(
            self,
            "Acl",
            scope="REGIONAL",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            description="Cordum API: rate limit per source address, AWS managed rules",
            rules=[
                rate_rule,
                _managed(COMMON_RULE_SET, 1, COUNTED_BODY_RULES),
                _managed(KNOWN_BAD_INPUTS_RULE_SET, 2),
            ],
            visibility_config=_visibility("CordumApi"),
        )
        self.association = wafv2.CfnWebACLAssociation(
            self, "Association", resource_arn=stage.stage_arn, web_acl_arn=self.acl.attr_arn
        )
        self.rate_limit = rate_limit
