"""The HTTP adapter: kube-scheduler's extender verbs and the operator endpoints."""

from phalanx.api.app import create_app, create_metrics_app

__all__ = ["create_app", "create_metrics_app"]
