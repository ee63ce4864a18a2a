"""Third tier: the operator's RBAC (operator/deploy/rbac.yaml) is enough (test_cluster.py runs the operator
as this ServiceAccount) and not wider: asked of the real apiserver, impersonating the ServiceAccount."""

from __future__ import annotations

import re

import pytest
from support.operator import CLUSTER_TIMEOUT, NAMESPACE

pytestmark = pytest.mark.timeout(CLUSTER_TIMEOUT)
OPERATOR = f"system:serviceaccount:{NAMESPACE}:agentfn-operator"

ALLOWED = [
    "list agents.agentfn.dev",
    "watch agents.agentfn.dev",
    "get agents.agentfn.dev",
    "list toolgrants.agentfn.dev",
    "watch toolgrants.agentfn.dev",
    "patch agents.agentfn.dev --subresource=status",
    "patch toolgrants.agentfn.dev --subresource=status",
    "create configmaps",
    "get configmaps/agentfn-registry",
    "patch configmaps/agentfn-registry",
    "create networkpolicies.networking.k8s.io",
    "patch networkpolicies.networking.k8s.io/agentfn-model-to-tools",
    "create leases.coordination.k8s.io",
    "patch leases.coordination.k8s.io/agentfn-operator",
    "create events",
]
DENIED = [
    "create agents.agentfn.dev",
    "patch agents.agentfn.dev",
    "update toolgrants.agentfn.dev",
    "delete toolgrants.agentfn.dev",
    "delete agents.agentfn.dev",
    "list configmaps",
    "get configmaps/somebody-elses",
    "patch configmaps/somebody-elses",
    "delete configmaps/agentfn-registry",
    "get secrets",
    "list secrets",
    "patch networkpolicies.networking.k8s.io/somebody-elses",
    "delete networkpolicies.networking.k8s.io/agentfn-model-to-tools",
    "patch leases.coordination.k8s.io/somebody-elses",
    "delete events",
    "create pods",
    "create rolebindings.rbac.authorization.k8s.io",
    "create serviceaccounts/token",
    "impersonate serviceaccounts",
    "list agents.agentfn.dev -n default",
    "patch configmaps/agentfn-registry -n kube-system",
    "list namespaces",
    "list customresourcedefinitions.apiextensions.k8s.io",
]
# Every rule the ServiceAccount has in its namespace, as `kubectl auth can-i --list` prints it (the
# self-review rules every user has are left out).
EXPECTED_RULES = {
    ("agents.agentfn.dev", "[]", "[get list watch]"),
    ("toolgrants.agentfn.dev", "[]", "[get list watch]"),
    ("agents.agentfn.dev/status", "[]", "[patch]"),
    ("toolgrants.agentfn.dev/status", "[]", "[patch]"),
    ("configmaps", "[]", "[create]"),
    ("configmaps", "[agentfn-registry]", "[get patch]"),
    ("networkpolicies.networking.k8s.io", "[]", "[create]"),
    ("networkpolicies.networking.k8s.io", "[agentfn-model-to-tools]", "[get patch]"),
    ("leases.coordination.k8s.io", "[]", "[create]"),
    ("leases.coordination.k8s.io", "[agentfn-operator]", "[get patch]"),
    ("events", "[]", "[create]"),
}


def can_i(operator_kube, question: str) -> bool:
    words = question.split()
    namespace = [] if "-n" in words else ["-n", NAMESPACE]
    done = operator_kube.kubectl("auth", "can-i", *words, *namespace, f"--as={OPERATOR}", check=False)
    assert done.stdout.strip() in ("yes", "no"), done.stderr
    return done.stdout.strip() == "yes"


@pytest.mark.parametrize("question", ALLOWED)
def test_the_operator_may(operator_kube, question):
    assert can_i(operator_kube, question)


@pytest.mark.parametrize("question", DENIED)
def test_the_operator_may_not(operator_kube, question):
    assert not can_i(operator_kube, question)


def test_the_operator_has_no_rule_beyond_its_own(operator_kube):
    header, *lines = operator_kube.kubectl(
        "auth", "can-i", "--list", "-n", NAMESPACE, f"--as={OPERATOR}"
    ).stdout.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]  # "Non-Resource URLs" is one header
    rules = set()
    for line in lines:
        resource, urls, names, verbs = (line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True))
        if urls != "[]" or resource.startswith("selfsubject"):
            continue  # discovery URLs and self-reviews: every authenticated user's
        rules.add((resource, names, verbs))
    assert rules == EXPECTED_RULES
