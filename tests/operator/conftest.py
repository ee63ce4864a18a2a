"""The operator's test parts: the examples, the CRDs, and for the third tier a real kube-apiserver.

The apiserver fixture is session-wide (about 5 s to start once the binary is cached; the first build on a
machine takes minutes, hence the long timeouts on the tests that use it). Everything it starts listens
on 127.0.0.1 and stops at the end of the session.
"""

from __future__ import annotations

import pytest
from support.operator import CRDS, NAMESPACE, RBAC

from agentfn.devstack.harness.apiserver import KubeAPI
from agentfn.operator import catalog


@pytest.fixture(scope="session")
def tool_catalog():
    return catalog.load()


@pytest.fixture(scope="session")
def operator_kube(apiserver: KubeAPI):
    """The session's real kube-apiserver with the CRDs, the agentfn namespace and the operator's RBAC applied."""
    # The 1.20 schema of a CRD has no x-kubernetes-validations: client-side validation would refuse
    # the field, and the apiserver drops it. Newer clusters keep and run the rules.
    apiserver.kubectl("apply", "--validate=false", "-f", str(CRDS))
    apiserver.kubectl("wait", "--for=condition=Established", "crd/agents.agentfn.dev", "crd/toolgrants.agentfn.dev")
    apiserver.kubectl("create", "namespace", NAMESPACE)
    apiserver.kubectl("apply", "-f", str(RBAC))
    return apiserver
