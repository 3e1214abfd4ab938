"""The Cosmos DB adapter's error translation, without a server: every vendor failure becomes the right
project error, with the original chained as ``__cause__``."""

from __future__ import annotations

import pytest
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    ServiceRequestError,
    ServiceRequestTimeoutError,
    ServiceResponseError,
    ServiceResponseTimeoutError,
)
from azure.cosmos.exceptions import (
    CosmosAccessConditionFailedError,
    CosmosClientTimeoutError,
    CosmosHttpResponseError,
    CosmosResourceExistsError,
    CosmosResourceNotFoundError,
)

from casekeeper.core.ports import Query
from casekeeper.errors import AlreadyExists, ConcurrencyConflict, StoreError, StoreUnavailable
from casekeeper.stores.cosmos import (
    STATUS_ERRORS,
    TRANSIENT_ERRORS,
    CosmosDocumentStore,
    OnMissing,
    _translate,
    build_query,
    translate_error,
)

# The brief's table, written out independently of the module's: status -> project error.
EXPECTED_STATUS_ERRORS: dict[int, type[StoreError]] = {
    408: StoreUnavailable,
    409: AlreadyExists,
    412: ConcurrencyConflict,
    429: StoreUnavailable,
    449: StoreUnavailable,
    500: StoreUnavailable,
    503: StoreUnavailable,
}
# Statuses with no special meaning: plain, non-retryable StoreError.
OTHER_STATUSES = [400, 401, 403, 405, 413, 423, 502, 504]


def http_error(
    status: int, cls: type[CosmosHttpResponseError] = CosmosHttpResponseError, **kwargs: object
) -> CosmosHttpResponseError:
    """An SDK response error as the SDK raises it, without a response object."""
    return cls(status_code=status, message=f"status {status}", **kwargs)


def raised_by(exc: BaseException, *, on_missing: OnMissing = "error") -> StoreError:
    """The project error ``_translate`` raises for ``exc``, checked to chain ``exc``."""
    with pytest.raises(StoreError) as caught, _translate("effects", "e1", on_missing=on_missing):
        raise exc
    assert caught.value.__cause__ is exc
    assert caught.value.container == "effects"
    assert caught.value.doc_id == "e1"
    return caught.value


def test_the_status_table_is_exactly_the_expected_one() -> None:
    assert dict(STATUS_ERRORS) == EXPECTED_STATUS_ERRORS
    assert 404 not in STATUS_ERRORS  # its meaning depends on the operation


@pytest.mark.parametrize(("status", "expected"), sorted(EXPECTED_STATUS_ERRORS.items()))
def test_each_mapped_status_becomes_its_error(status: int, expected: type[StoreError]) -> None:
    error = raised_by(http_error(status))
    assert type(error) is expected
    assert str(status) in str(error)


@pytest.mark.parametrize("status", OTHER_STATUSES)
def test_any_other_status_is_a_plain_store_error(status: int) -> None:
    error = raised_by(http_error(status))
    assert type(error) is StoreError
    assert not error.retryable


def test_the_sdk_subclasses_map_like_their_status() -> None:
    assert type(raised_by(http_error(409, CosmosResourceExistsError))) is AlreadyExists
    lost_race = http_error(412, CosmosAccessConditionFailedError)
    assert type(raised_by(lost_race)) is ConcurrencyConflict


@pytest.mark.parametrize(
    ("on_missing", "expected"),
    [("conflict", ConcurrencyConflict), ("error", StoreError)],
)
def test_404_depends_on_the_operation(on_missing: OnMissing, expected: type[StoreError]) -> None:
    error = raised_by(http_error(404, CosmosResourceNotFoundError), on_missing=on_missing)
    assert type(error) is expected


def test_404_on_a_read_or_plain_delete_is_absence_not_an_error() -> None:
    with _translate("effects", "e1", on_missing="absent") as outcome:
        raise http_error(404, CosmosResourceNotFoundError)
    assert outcome.missing is True
    with _translate("effects", "e1", on_missing="absent") as outcome:
        pass
    assert outcome.missing is False


@pytest.mark.parametrize("on_missing", ["absent", "conflict", "error"])
def test_404_for_a_missing_container_is_always_a_store_error(on_missing: OnMissing) -> None:
    exc = http_error(404, CosmosResourceNotFoundError, sub_status=1003)
    error = raised_by(exc, on_missing=on_missing)
    assert type(error) is StoreError


@pytest.mark.parametrize(
    "exc",
    [
        ServiceRequestError("connection refused"),
        ServiceRequestTimeoutError("connect timeout"),
        ServiceResponseError("connection reset"),
        ServiceResponseTimeoutError("read timeout"),
        CosmosClientTimeoutError(),  # type: ignore[no-untyped-call]
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_transport_failures_are_unavailable(exc: AzureError) -> None:
    assert isinstance(exc, TRANSIENT_ERRORS)
    error = raised_by(exc)
    assert type(error) is StoreUnavailable
    assert error.retryable


def test_other_azure_errors_are_plain_store_errors() -> None:
    assert type(raised_by(AzureError("odd"))) is StoreError
    assert type(raised_by(ClientAuthenticationError("no token"))) is StoreError


def test_errors_that_are_not_azure_errors_pass_through_untouched() -> None:
    original = ValueError("bad argument")
    with pytest.raises(ValueError, match="bad argument") as caught, _translate("effects", "e1"):
        raise original
    assert caught.value is original


def test_translate_error_is_pure_and_names_the_document() -> None:
    exc = http_error(429)
    error = translate_error(exc, container="cases", doc_id="k1", on_missing="error")
    assert isinstance(error, StoreUnavailable)
    assert "cases/k1" in str(error)
    assert error.__cause__ is None  # only _translate raises, and chains
    assert (
        translate_error(
            http_error(404, CosmosResourceNotFoundError),
            container="cases",
            doc_id="k1",
            on_missing="absent",
        )
        is None
    )


# --- no I/O, no vendor leaks at the edges ---------------------------------------------------------


def test_constructing_a_store_does_no_network_io() -> None:
    # Port 9 on loopback: nothing listens there. Construction must not notice; the first call must
    # fail as StoreUnavailable (connection refused), not as an azure error.
    store = CosmosDocumentStore(
        "https://127.0.0.1:9", "db", credential="a2V5", retry_total=0, retry_connect=0, retry_read=0
    )
    with pytest.raises(StoreUnavailable) as caught:
        store.read("cases", "k1", "k1")
    assert isinstance(caught.value.__cause__, ServiceRequestError)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.read("cases", "k1", "k1")


def test_build_query_parameterises_values_and_checks_names() -> None:
    sql, parameters = build_query(
        "effects",
        Query(
            partition="c1",
            equals={"status": "started", "value": 3},
            ts_before=10.5,
            order_by_ts="desc",
            limit=2,
        ),
    )
    assert sql == (
        'SELECT TOP 2 * FROM c WHERE c["caseId"] = @pk AND c["status"] = @p0 AND c["value"] = @p1'
        " AND c._ts < @tsBefore ORDER BY c._ts DESC"
    )
    assert parameters == [
        {"name": "@pk", "value": "c1"},
        {"name": "@p0", "value": "started"},
        {"name": "@p1", "value": 3},
        {"name": "@tsBefore", "value": 10.5},
    ]
    assert build_query("health", Query()) == ("SELECT * FROM c", [])
    for bad in ['x"] OR 1=1 --', "a.b", "1abc", "", "_etag"]:
        with pytest.raises(ValueError, match="field"):
            build_query("effects", Query(equals={bad: 1}))
    with pytest.raises(ValueError, match="limit"):
        build_query("effects", Query(limit=-1))
    with pytest.raises(ValueError, match="container"):
        build_query("nope", Query())
