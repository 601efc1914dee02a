"""The Grafana dashboard and Prometheus alert rules in deploy/ reference only metrics the code
exports (names collected from the code's prometheus_client registrations)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT: Final = Path(__file__).resolve().parents[3]
DASHBOARD: Final = ROOT / "deploy" / "grafana" / "dashboards" / "vigil.json"
DATASOURCE: Final = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
ALERTS: Final = ROOT / "deploy" / "prometheus" / "alerts.yml"
_KINDS: Final = {"Counter", "Gauge", "Histogram", "Summary"}
_NAME: Final = re.compile(r"\bvigil_[a-z0-9_]+\b")


def registered_metrics() -> dict[str, str]:
    """Metric name → kind for every ``Counter/Gauge/Histogram/Summary("vigil_…", …)`` call."""
    found: dict[str, str] = {}
    for package in ("pipeline", "consumers", "producers"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                func = node.func
                kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                first = node.args[0]
                name = first.value if isinstance(first, ast.Constant) else None
                if kind in _KINDS and isinstance(name, str) and name.startswith("vigil_"):
                    found[name] = str(kind)
    return found


def exported_series(registered: dict[str, str]) -> set[str]:
    """The series names Prometheus scrapes for those metrics (prometheus_client's suffixes)."""
    names: set[str] = set()
    for name, kind in registered.items():
        base = name.removesuffix("_total") if kind == "Counter" else name
        if kind == "Counter":
            names |= {f"{base}_total", f"{base}_created"}
        elif kind in ("Histogram", "Summary"):
            names |= {f"{base}_count", f"{base}_sum", f"{base}_created"}
            if kind == "Histogram":
                names.add(f"{base}_bucket")
        else:
            names.add(base)
    return names


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def alert_exprs() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [str(r["expr"]) for g in rules["groups"] for r in g["rules"]]


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def test_collector_finds_the_metrics_every_process_registers() -> None:
    registered = registered_metrics()
    for name in (
        "vigil_evaluator_evaluations",
        "vigil_delivery_results",
        "vigil_runtime_commit_seconds",
        "vigil_delivery_end_to_end_seconds",
        "vigil_commands",
        "vigil_ticker_due_instants",
    ):
        assert name in registered
    assert registered["vigil_runtime_commit_seconds"] == "Histogram"
    assert "vigil_evaluator_evaluations_total" in exported_series(registered)


def test_every_dashboard_panel_references_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    exported = exported_series(registered_metrics())
    exprs = dashboard_exprs(dashboard)
    assert len(exprs) >= 20
    used = {name for expr in exprs for name in _NAME.findall(expr)}
    assert used, "panels must query vigil metrics"
    assert used - exported == set()


def test_every_alert_rule_references_only_exported_metrics() -> None:
    exported = exported_series(registered_metrics())
    used = {name for expr in alert_exprs() for name in _NAME.findall(expr)}
    assert used - exported == set()


def test_dashboard_covers_lag_dead_letters_budgets_latency_commits_and_errors(
    dashboard: dict[str, Any],
) -> None:
    text = " ".join(dashboard_exprs(dashboard))
    for needed in (
        "vigil_evaluator_consumer_lag",
        "vigil_runtime_dead_letters_total",
        "vigil_delivery_dead_letters_total",
        "vigil_evaluator_budget_suppressions_total",
        "vigil_delivery_end_to_end_seconds_bucket",
        "vigil_runtime_commit_seconds_bucket",
        "vigil_evaluator_skipped_total",
        "vigil_evaluator_evaluations_total",
        "vigil_delivery_results_total",
    ):
        assert needed in text
    alerts = " ".join(alert_exprs())
    for needed in ("consumer_lag", "dead_letters", "budget_suppressions", "end_to_end", "commit"):
        assert needed in alerts


def test_dashboard_panels_are_well_formed_and_use_the_provisioned_datasource(
    dashboard: dict[str, Any],
) -> None:
    provisioned = yaml.safe_load(DATASOURCE.read_text(encoding="utf-8"))
    uid = provisioned["datasources"][0]["uid"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] and dashboard["title"]
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == uid
            assert target["expr"].count("(") == target["expr"].count(")")


def test_compose_provisions_the_dashboard_alerts_and_vigil_processes() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]
    grafana = {m.split(":")[1]: m.split(":")[0] for m in services["grafana"]["volumes"]}
    assert (ROOT / grafana["/var/lib/grafana/dashboards"] / "vigil.json").is_file()
    provisioning = ROOT / grafana["/etc/grafana/provisioning"]
    providers = yaml.safe_load((provisioning / "dashboards" / "vigil.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    assert (provisioning / "datasources" / "prometheus.yml").is_file()
    mounts = {m.split(":")[1]: m.split(":")[0] for m in services["prometheus"]["volumes"]}
    assert (ROOT / mounts["/etc/prometheus/alerts.yml"]) == ALERTS
    for name in ("command-processor", "evaluator", "ticker", "delivery", "daemon", "api"):
        assert services[name]["command"] == [name]
        assert services[name]["build"]["dockerfile"] == "deploy/vigil/Dockerfile"
    assert (ROOT / "deploy" / "vigil" / "Dockerfile").is_file()
