"""The cache as deployed on a real account: engine and size from the context, data
kept across a delete or a replacement, windows that do not collide, idle connections
closed, terminal-job retention handed to the functions (CDK template assertions).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_network_cache import _aws
from tests.infra.test_synth import (
    HANDLERS,
    LOCAL_REDIS,
    NATS,
    _functions,
    _logical_id,
    _resources,
    _settings,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
    local,  # noqa: F401  (the local stack fixture)
)

cdk = pytest.importorskip("aws_cdk")
from cordum_infra.cache_users import resource_id  # noqa: E402
from cordum_infra.settings import ContextError  # noqa: E402

from cordum.config import DEFAULT_JOB_RETENTION_S  # noqa: E402
from cordum.redis_acl import USERS, WORKERS  # noqa: E402

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WEEK_MIN = 7 * 24 * 60


@pytest.fixture(scope="module")
def default(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the AWS stack without any cache context."""
    return _aws(inputs, tmp_path_factory.mktemp("cache-default"))


@pytest.fixture(scope="module")
def valkey(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given an AWS stack on Valkey, a larger node and a 2-day retention."""
    return _aws(inputs, tmp_path_factory.mktemp("cache-valkey"), cacheEngine="valkey",
                cacheNodeType="cache.r7g.large", jobRetentionSeconds="172800")


def _group(stack_view: dict[str, Any]) -> dict[str, Any]:
    stack = stack_view["stack"]
    assert stack.cache is not None
    return stack_view["json"]["Resources"][_logical_id(stack, stack.cache.replication_group)]


def _parameter_group(stack_view: dict[str, Any]) -> dict[str, Any]:
    groups = _resources(stack_view["json"], "AWS::ElastiCache::ParameterGroup")
    ((group_id, group),) = groups.items()
    assert _group(stack_view)["Properties"]["CacheParameterGroupName"] == {"Ref": group_id}
    return group["Properties"]


def _minutes(day: int, clock: str) -> int:
    hours, minutes = clock.split(":")
    return day * 24 * 60 + int(hours) * 60 + int(minutes)


def _weekly(start: int, end: int) -> set[int]:
    """Minutes of the week covered by [start, end), wrapping at the week's end."""
    length = (end - start) % WEEK_MIN
    return {(start + m) % WEEK_MIN for m in range(length)}


# --- engine and node type ----------------------------------------------------------------


def test_engine_node_type_and_family_follow_the_context(valkey: dict[str, Any]) -> None:
    props = _group(valkey)["Properties"]
    # Then the replication group runs Valkey 8 on the node type asked for
    assert props["Engine"] == "valkey"
    assert props["EngineVersion"].startswith("8.")
    assert props["CacheNodeType"] == "cache.r7g.large"
    # And its parameter group is of the Valkey 8 family, still never evicting
    group = _parameter_group(valkey)
    assert group["CacheParameterGroupFamily"] == "valkey8"
    assert group["Properties"]["maxmemory-policy"] == "noeviction"


def test_default_engine_is_redis_7_and_its_family(default: dict[str, Any]) -> None:
    props = _group(default)["Properties"]
    assert props["Engine"] == "redis"
    assert props["EngineVersion"].startswith("7.")
    assert _parameter_group(default)["CacheParameterGroupFamily"] == "redis7"


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"cacheEngine": "memcached"}, "context cacheEngine must be redis or valkey"),
        ({"cacheNodeType": "r7g.large"}, "context cacheNodeType must be an ElastiCache node type"),
        ({"cacheNodeType": "cache.t2.micro"}, "context cacheNodeType cache.t2.micro"),
        ({"jobRetentionSeconds": "2d"}, "context jobRetentionSeconds must be a whole number"),
        ({"jobRetentionSeconds": "60"}, "context jobRetentionSeconds must be between"),
    ],
)
def test_bad_cache_context_is_an_error(
    inputs: dict[str, Path], context: dict[str, str], message: str,  # noqa: F811
) -> None:
    with pytest.raises(ContextError, match=message):
        _settings(inputs, natsUrl=NATS, **context)


def test_cache_context_needs_an_aws_stack(inputs: dict[str, Path]) -> None:  # noqa: F811
    # Given a local stack (redisUrl: no ElastiCache), sizing a cache is a mistake
    for key, value in (("cacheNodeType", "cache.r7g.large"), ("cacheEngine", "valkey")):
        with pytest.raises(ContextError, match=rf"context {key} .* \(no redisUrl\)"):
            _settings(inputs, natsUrl=NATS, redisUrl=LOCAL_REDIS, **{key: value})


# --- data kept ---------------------------------------------------------------------------


def test_a_delete_or_replacement_snapshots_the_job_store(default: dict[str, Any]) -> None:
    group = _group(default)
    # Then deleting the stack, or a change that replaces the group, first takes a snapshot
    assert group["DeletionPolicy"] == "Snapshot"
    assert group["UpdateReplacePolicy"] == "Snapshot"
    # And daily snapshots are kept
    assert group["Properties"]["SnapshotRetentionLimit"] >= 1


def test_snapshot_and_maintenance_windows_do_not_overlap(default: dict[str, Any]) -> None:
    props = _group(default)["Properties"]
    snap_start, snap_end = props["SnapshotWindow"].split("-")
    maint_start, maint_end = props["PreferredMaintenanceWindow"].split("-")
    # Then the snapshot window is at least the 60 minutes ElastiCache requires
    start, end = _minutes(0, snap_start), _minutes(0, snap_end)
    assert (end - start) % (24 * 60) >= 60
    # And on no day of the week does it touch the weekly maintenance window
    snapshot = set().union(*(_weekly(_minutes(d, snap_start), _minutes(d, snap_end))
                             for d in range(7)))
    m_day, m_clock = maint_start[:3].capitalize(), maint_start[4:]
    e_day, e_clock = maint_end[:3].capitalize(), maint_end[4:]
    maintenance = _weekly(_minutes(DAYS.index(m_day), m_clock),
                          _minutes(DAYS.index(e_day), e_clock))
    assert len(maintenance) >= 60
    assert not snapshot & maintenance


def test_idle_connections_are_closed_by_the_cache(default: dict[str, Any]) -> None:
    # Then a connection idle longer than the timeout is closed by Redis: a frozen
    # Lambda container's pool does not hold its connections for ever
    timeout = int(_parameter_group(default)["Properties"]["timeout"])
    assert 0 < timeout <= 3600


# --- retention ---------------------------------------------------------------------------


def test_functions_get_the_retention_from_the_context(valkey: dict[str, Any]) -> None:
    functions = _functions(valkey["json"])
    assert HANDLERS <= set(functions)
    for module in HANDLERS:
        props = functions[module]
        assert props["Environment"]["Variables"]["CORDUM_JOB_RETENTION_S"] == "172800", module


def test_functions_get_the_default_retention(
    default: dict[str, Any], local: dict[str, Any],  # noqa: F811
) -> None:
    for view in (default, local):
        functions = _functions(view["json"])
        for module in HANDLERS:
            env = functions[module]["Environment"]["Variables"]
            assert env["CORDUM_JOB_RETENTION_S"] == str(DEFAULT_JOB_RETENTION_S), module


# --- users -------------------------------------------------------------------------------


def _users(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """User name -> properties of each AWS::ElastiCache::User."""
    return {u["Properties"]["UserName"]: u["Properties"]
            for u in _resources(view["json"], "AWS::ElastiCache::User").values()}


def test_each_kind_of_client_has_its_own_user_with_the_local_stacks_rules(
    default: dict[str, Any], valkey: dict[str, Any],
) -> None:
    for view, engine in ((default, "redis"), (valkey, "valkey")):
        stack, users = view["stack"], _users(view)
        # Then the functions, the bridge, the kernel and the workers each have a user,
        # with the ACL rules the local stack's Redis gives it (cordum.redis_acl)
        assert set(users) == {u.name for u in USERS} | {"default"}
        for user in USERS:
            props = users[user.name]
            assert props["AccessString"] == user.rules
            assert props["Engine"] == engine
            # And its password is its secret's, by reference, never a literal
            (password,) = props["AuthenticationMode"]["Passwords"]
            assert props["AuthenticationMode"]["Type"] == "password"
            assert "{{resolve:secretsmanager:" in json.dumps(password)
            assert ":SecretString:password::}}" in json.dumps(password)
        # And a worker may read contexts and artifacts and write results, nothing else
        assert users[WORKERS.name]["AccessString"] == (
            "on %R~ctx:* %R~art:* %W~res:* -@all +get +set +ping")
        # And the default user ElastiCache requires is switched off, allowed nothing
        assert users["default"]["AccessString"].split()[0] == "off"
        assert "-@all" in users["default"]["AccessString"].split()
        # And the group holds all five and is the replication group's only group
        ((group_id, group),) = _resources(view["json"], "AWS::ElastiCache::UserGroup").items()
        user_ids = {uid for uid, u in _resources(view["json"], "AWS::ElastiCache::User").items()}
        assert {ref["Ref"] for ref in group["Properties"]["UserIds"]} == user_ids
        assert group["Properties"]["Engine"] == engine
        assert _group(view)["Properties"]["UserGroupIds"] == [{"Ref": group_id}]
        assert "AuthToken" not in _group(view)["Properties"]
        assert stack.cache is not None


def test_user_ids_are_unique_to_the_stack_and_legal(default: dict[str, Any]) -> None:
    ids = [u["Properties"]["UserId"]
           for u in _resources(default["json"], "AWS::ElastiCache::User").values()]
    (group,) = _resources(default["json"], "AWS::ElastiCache::UserGroup").values()
    ids.append(group["Properties"]["UserGroupId"])
    # Then every id is ElastiCache's shape (lowercase, digits, single hyphens, <= 40) and
    # carries the stack's name, so a second stack in the account does not collide
    assert len(set(ids)) == len(ids)
    for uid in ids:
        assert re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", uid) and "--" not in uid, uid
        assert len(uid) <= 40, uid
        assert uid.startswith("cordumserverless-"), uid
    # And two long stack names sharing their beginning still get different ids
    long_a, long_b = "A" * 40 + "-one", "A" * 40 + "-two"
    assert resource_id(long_a, "functions") != resource_id(long_b, "functions")
    assert all(len(resource_id(n, "functions")) <= 40 for n in (long_a, long_b))


def test_fargate_services_log_in_as_their_own_users(default: dict[str, Any]) -> None:
    tpl, stack = default["json"], default["stack"]
    assert stack.cache is not None
    containers = {c["Name"]: c for t in _resources(tpl, "AWS::ECS::TaskDefinition").values()
                  for c in t["Properties"]["ContainerDefinitions"]}
    for name, role, user in (("bridge", "bridge", "cordum-bridge"),
                             ("safety-kernel", "kernel", "cordum-kernel")):
        container = containers[name]
        env = {e["Name"]: e["Value"] for e in container["Environment"]}
        secrets = {s["Name"]: s["ValueFrom"] for s in container["Secrets"]}
        secret = {"Ref": _logical_id(stack, stack.cache.users.secret(role))}
        # Then each names its own user and gets that user's password, nobody else's
        assert env["REDIS_USERNAME"] == user, name
        assert secrets["REDIS_AUTH_TOKEN"] == {"Fn::Join": ["", [secret, ":password::"]]}


def test_functions_read_the_functions_login_and_workers_get_theirs_as_an_output(
    default: dict[str, Any],
) -> None:
    tpl, stack = default["json"], default["stack"]
    assert stack.cache is not None
    functions_secret = {"Ref": _logical_id(stack, stack.cache.users.secret("functions"))}
    for module, props in _functions(tpl).items():
        env = props["Environment"]["Variables"]
        assert env["REDIS_AUTH_SECRET_ARN"] == functions_secret, module
    # And the workers' login is a stack output for their operator
    worker_secret = {"Ref": _logical_id(stack, stack.cache.users.secret("worker"))}
    assert worker_secret in [o["Value"] for o in tpl["Outputs"].values()]
