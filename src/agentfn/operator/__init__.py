"""The agentfn operator: Agents and ToolGrants in, the registry ConfigMap, a NetworkPolicy, statuses out.

Run it with `kopf run -m agentfn.operator --namespace agentfn`. The modules below hold its handlers, one
concern each; the pure part is `reconcile.py`, which local mode (`python -m agentfn.operator.local`)
runs over YAML files too.
"""

from . import agents, grants, login, startup  # noqa: F401  (importing registers the handlers)
