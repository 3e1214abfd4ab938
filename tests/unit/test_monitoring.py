"""The alert rules in ``infra/app/alerts.bicep``: who is told, about what, and how often.

The Casekeeper-alert rule is checked against a real alert record: ``shared.app.alerts.Alerter`` raises one,
the OpenTelemetry logging handler that ``configure_azure_monitor(logger_name="casekeeper")`` installs
records it, and the Azure Monitor exporter turns it into the telemetry item Application Insights stores
as an ``AppTraces`` row. Every ``Properties[...]`` field the rule's query reads must be on that item.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import tree_sitter

from casekeeper.core.clock import ManualClock
from casekeeper.stores.sqlite import SqliteDocumentStore
from shared.app.alerts import Alerter
from tests.unit.test_infra import (
    APP,
    MAIN,
    ROOT,
    _body,
    _path,
    _properties,
    _string,
    _text,
    declared,
    param_default,
    resources_of_type,
)

ALERTS = APP / "alerts.bicep"
ALERT_QUERY = APP / "alert-records.kql"

# Fields the alert rule's query reads that the alert record does not carry (none: shared/app/alerts.py logs
# alertId, the durable record's id, and alertKind with every alert).
PENDING_ALERT_RECORD_FIELDS: set[str] = set()


def _strings(node: tree_sitter.Node) -> list[str]:
    values = [_string(child) for child in node.named_children]
    assert all(v is not None for v in values), _text(node)
    return [v for v in values if v is not None]


def _log_rule(query_file: str) -> tree_sitter.Node:
    """The properties of the log search alert whose query is ``query_file``."""
    for resource in resources_of_type(ALERTS, "Microsoft.Insights/scheduledQueryRules@"):
        props = _path(_body(resource.value), "properties")
        [criterion] = _path(props, "criteria", "allOf").named_children
        if _text(_path(criterion, "query")) == f"loadTextContent('{query_file}')":
            return props
    raise AssertionError(f"no log search alert reads {query_file}")


def _metric_alert(metric: str) -> tree_sitter.Node:
    for resource in resources_of_type(ALERTS, "Microsoft.Insights/metricAlerts@"):
        props = _path(_body(resource.value), "properties")
        [criterion] = _path(props, "criteria", "allOf").named_children
        if _string(_path(criterion, "metricName")) == metric:
            return props
    raise AssertionError(f"no metric alert on {metric}")


def _variable(name: str) -> tree_sitter.Node:
    value = declared(ALERTS, "var")[name].value
    assert value is not None
    return value


def _query_without_comments(path: Path = ALERT_QUERY) -> str:
    return "\n".join(line.split("//", 1)[0] for line in path.read_text().splitlines())


# -- who is told --


def test_every_rule_notifies_the_action_group_when_an_email_address_is_given() -> None:
    params = declared(ALERTS, "param")
    assert _string(params["alertEmailAddress"].value) == "", "optional: empty by default"
    assert "recommended" in params["alertEmailAddress"].decorator_source
    main_params = declared(MAIN, "param")
    assert _string(main_params["alertEmailAddress"].value) == ""
    assert "recommended" in main_params["alertEmailAddress"].decorator_source
    [group] = resources_of_type(ALERTS, "Microsoft.Insights/actionGroups@")
    assert group.value is not None and group.value.type == "if_statement"
    assert "notify" in _text(group.value.named_children[0])
    [receiver] = _path(_body(group.value), "properties", "emailReceivers").named_children
    assert _text(_path(receiver, "emailAddress")) == "alertEmailAddress"
    assert _text(_path(receiver, "useCommonAlertSchema")) == "true"
    assert len(_string(_path(_body(group.value), "properties", "groupShortName")) or "") <= 12
    # Each rule takes the action group: the log rule by id, the metric rules as actions.
    for query_file in ("alert-records.kql", "function-failures.kql"):
        assert _text(_path(_log_rule(query_file), "actions", "actionGroups")) == "actionGroupIds"
    assert _text(_path(_metric_alert("DeadletteredMessages"), "actions")) == "metricAlertActions"
    for name in ("actionGroupIds", "metricAlertActions"):
        assert "actionGroup.id" in _text(_variable(name)) and _text(_variable(name)).startswith("notify ?")
    # main.bicep hands the address on, and azd takes it from the environment.
    [module] = [m for m in declared(MAIN, "module").values() if m.target == "app/alerts.bicep"]
    assert _text(_path(_body(module.value), "params", "alertEmailAddress")) == "alertEmailAddress"
    readme = (ROOT / "docs" / "deploying.md").read_text()  # the deployment steps, linked from the README
    assert "azd env set ALERT_EMAIL_ADDRESS " in readme and "alertEmailAddress=" in readme


# -- Casekeeper alerts: once each --


def test_the_casekeeper_alert_rule_counts_each_record_once_and_splits_by_alert_id() -> None:
    props = _log_rule("alert-records.kql")
    frequency, window = _string(_path(props, "evaluationFrequency")), _string(_path(props, "windowSize"))
    assert frequency == window, "windows must neither overlap (twice) nor leave gaps (never)"
    assert _text(_path(props, "autoMitigate")) == "false"
    [criterion] = _path(props, "criteria", "allOf").named_children
    assert _text(_path(criterion, "query")) == "loadTextContent('alert-records.kql')"
    assert _string(_path(criterion, "timeAggregation")) == "Count"
    assert (_string(_path(criterion, "operator")), _text(_path(criterion, "threshold"))) == ("GreaterThan", "0")
    periods = _path(criterion, "failingPeriods")
    assert _text(_path(periods, "numberOfEvaluationPeriods")) == _text(_path(periods, "minFailingPeriodsToAlert"))
    dimensions = {_string(_path(d, "name")): d for d in _path(criterion, "dimensions").named_children}
    assert "alertId" in dimensions
    for name, dimension in dimensions.items():
        assert _string(_path(dimension, "operator")) == "Include" and _strings(_path(dimension, "values")) == ["*"]
        # A split dimension must be a column of the query's result.
        assert re.search(rf"\b{name}\b", _query_without_comments().split("| project", 1)[1]), name
    query = _query_without_comments()
    assert "ago(" not in query, "the rule's window sets the time range; ago() would not widen it"
    assert query.lstrip().startswith("AppTraces")


def _exported_alert_record(tmp_path: Path) -> dict[str, object]:
    """Raise an alert through the real Alerter and return the Application Insights item it becomes."""
    from azure.monitor.opentelemetry.exporter.export.logs._exporter import _convert_log_to_envelope
    from opentelemetry.instrumentation.logging.handler import LoggingHandler  # the handler the distro installs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = LoggingHandler(logger_provider=provider)
    logger = logging.getLogger("casekeeper")  # shared/telemetry.configure: configure_azure_monitor(logger_name=...)
    logger.addHandler(handler)
    try:
        raised = Alerter(SqliteDocumentStore(str(tmp_path / "store.sqlite")), ManualClock()).raise_alert(
            "effect_escalated",
            "effect abc of case C-3 needs a person",
            {"caseId": "C-3", "effectKey": "abc"},
            dedupe_key="abc",
        )
    finally:
        logger.removeHandler(handler)
    assert raised
    [record] = exporter.get_finished_logs()
    data = _convert_log_to_envelope(record).data
    assert data is not None and data.base_type == "MessageData", "alerts must land in AppTraces"
    item = data.base_data
    return {"SeverityLevel": item.severity_level, "Message": item.message, "Properties": dict(item.properties)}


def test_the_alert_query_reads_what_the_alert_record_carries(tmp_path: Path) -> None:
    item = _exported_alert_record(tmp_path)
    query = _query_without_comments()
    properties = item["Properties"]
    assert isinstance(properties, dict)
    # The filters hold for the record.
    [(logger_field, logger_name)] = re.findall(r'Properties\["(\w+)"\]\) == "([\w.]+)"', query)
    assert properties[logger_field] == logger_name == "casekeeper.alerts"
    [threshold] = re.findall(r"SeverityLevel >= (\d)", query)
    assert isinstance(item["SeverityLevel"], int) and item["SeverityLevel"] >= int(threshold)
    # Every field it reads is on the record (or pending, see PENDING_ALERT_RECORD_FIELDS).
    read = set(re.findall(r'Properties\["(\w+)"\]', query))
    assert {"alertKind", "alertId", "caseId"} <= read
    missing = sorted(read - set(properties) - PENDING_ALERT_RECORD_FIELDS)
    assert not missing, f"the alert query reads fields the alert record does not carry: {missing}"
    assert properties["alertKind"] == "effect_escalated" and properties["caseId"] == "C-3"


# -- dead letters and failures --


def test_dead_letters_of_the_case_events_queue_alert() -> None:
    props = _metric_alert("DeadletteredMessages")
    [criterion] = _path(props, "criteria", "allOf").named_children
    assert _string(_path(criterion, "metricNamespace")) == "Microsoft.ServiceBus/namespaces"
    assert _text(_path(props, "scopes")).replace(" ", "").replace("\n", "") == "[serviceBusNamespaceId]"
    [dimension] = _path(criterion, "dimensions").named_children
    assert _string(_path(dimension, "name")) == "EntityName"
    assert _string(_path(dimension, "operator")) == "Include"
    assert _text(_path(dimension, "values")).replace(" ", "").replace("\n", "") == "[caseEventsQueueName]"
    [module] = [m for m in declared(MAIN, "module").values() if m.target == "app/alerts.bicep"]
    params = _properties(_path(_body(module.value), "params"))
    assert _text(params["caseEventsQueueName"]) == "serviceBus.outputs.queueName"
    assert _text(params["serviceBusNamespaceId"]) == "serviceBus.outputs.namespaceId"
    assert (_string(_path(criterion, "operator")), _text(_path(criterion, "threshold"))) == ("GreaterThan", "0")
    assert _text(_path(props, "autoMitigate")) == "true"


FAILURE_QUERY = APP / "function-failures.kql"


def test_function_failures_alert_counts_the_never_sampled_failure_records() -> None:
    props = _log_rule("function-failures.kql")
    assert _text(_path(props, "scopes")).replace(" ", "").replace("\n", "") == "[logAnalyticsWorkspaceId]"
    assert _string(_path(props, "evaluationFrequency")) == _string(_path(props, "windowSize"))
    assert _text(_path(props, "autoMitigate")) == "true"
    [criterion] = _path(props, "criteria", "allOf").named_children
    assert (_string(_path(criterion, "operator")), _text(_path(criterion, "threshold"))) == ("GreaterThan", "0")
    dimensions = [_string(_path(d, "name")) for d in _path(criterion, "dimensions").named_children]
    assert dimensions == ["function"]
    query = _query_without_comments(FAILURE_QUERY)
    assert query.lstrip().startswith("AppTraces") and "ago(" not in query
    assert re.search(r"\bfunction\b", query.split("| project", 1)[1])
    assert not resources_of_type(ALERTS, "Microsoft.Insights/metricAlerts@2018-03-01") or all(
        "requests/failed" not in _text(r.node) for r in resources_of_type(ALERTS, "Microsoft.Insights/metricAlerts@")
    ), "requests/failed misses the failures of unsampled traces"


def test_the_failure_query_reads_what_a_failed_invocation_records() -> None:
    """A trigger that raises, through the real wrapper, the real OpenTelemetry handler and the exporter's
    conversion: the item it becomes carries every field the query reads."""
    from azure.monitor.opentelemetry.exporter.export.logs._exporter import _convert_log_to_envelope
    from opentelemetry.instrumentation.logging.handler import LoggingHandler
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    from shared.functions.failures import reported

    @reported
    def case_worker() -> None:
        raise TimeoutError("store did not answer")

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = LoggingHandler(logger_provider=provider)
    logger = logging.getLogger("casekeeper")
    logger.addHandler(handler)
    try:
        with pytest.raises(TimeoutError):
            case_worker()
    finally:
        logger.removeHandler(handler)
    [record] = exporter.get_finished_logs()
    data = _convert_log_to_envelope(record).data
    assert data is not None and data.base_type == "MessageData"
    properties = dict(data.base_data.properties)
    query = _query_without_comments(FAILURE_QUERY)
    [(logger_field, logger_name)] = re.findall(r'Properties\["(\w+)"\]\) == "([\w.]+)"', query)
    assert properties[logger_field] == logger_name == "casekeeper.invocations"
    [threshold] = re.findall(r"SeverityLevel >= (\d)", query)
    assert data.base_data.severity_level >= int(threshold)
    read = set(re.findall(r'Properties\["(\w+)"\]', query))
    assert read - {logger_field} <= set(properties), read - set(properties)
    assert properties["function"] == "case_worker" and properties["errorType"] == "TimeoutError"


@pytest.mark.parametrize(
    ("output", "module_output"),
    [("logAnalyticsWorkspaceId", "logAnalyticsId")],
)
def test_alert_scopes_are_the_monitoring_resources(output: str, module_output: str) -> None:
    [module] = [m for m in declared(MAIN, "module").values() if m.target == "app/alerts.bicep"]
    params = _properties(_path(_body(module.value), "params"))
    assert _text(params[output]) == f"monitoring.outputs.{module_output}"
    assert param_default(MAIN, "alertEmailAddress") is not None
