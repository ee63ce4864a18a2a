"""The NetworkPolicy the registry implies: egress from the model function to the tool functions in use.

Policies add up: this one selects the model function's pods and allows egress only to the functions
serving a tool that some grant gives (through any channel); the chart's own policies allow the rest the
model function needs (DNS, memory's recall, the engines). With no grant, it allows no egress of its own.
Pods are matched by the function label (Knative sets `serving.knative.dev/service` to the Service's
name); ports are the functions' own, so the selector is the wall.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .config import LABELS, Config

MODEL_FUNCTION = "model"


def policy(config: Config, functions: Iterable[str]) -> dict[str, Any]:
    services = sorted({config.function_service(f) for f in functions})
    egress = (
        [
            {
                "to": [
                    {
                        "podSelector": {
                            "matchExpressions": [{"key": config.function_label, "operator": "In", "values": services}]
                        }
                    }
                ]
            }
        ]
        if services
        else []
    )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": config.network_policy,
            "namespace": config.namespace,
            "labels": {**LABELS, "app.kubernetes.io/component": "registry"},
            "annotations": {
                "agentfn.dev/why": "egress from the model function to the tool functions some "
                "ToolGrant uses; written by the agentfn operator"
            },
        },
        "spec": {
            "podSelector": {"matchLabels": {config.function_label: config.function_service(MODEL_FUNCTION)}},
            "policyTypes": ["Egress"],
            "egress": egress,
        },
    }
