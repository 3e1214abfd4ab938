"""Connection strings as the Functions extensions take them: parsed exactly, and keys never echoed."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.app.connections import ConnectionStringError, parse_cosmos, parse_service_bus

# Account keys are base64: '+', '/' and '=' padding, which a naive split on '=' would cut.
keys = st.binary(min_size=1, max_size=64).map(lambda raw: base64.b64encode(raw).decode())
hosts = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z0-9-]{1,10}){0,3}", fullmatch=True)
ports = st.integers(min_value=1, max_value=65535)


@given(host=hosts, port=ports, key=keys, trailing=st.sampled_from(["", ";", ";;"]))
def test_a_cosmos_string_gives_back_its_endpoint_and_key_exactly(host: str, port: int, key: str, trailing: str) -> None:
    endpoint = f"https://{host}:{port}/"
    account = parse_cosmos(f"AccountEndpoint={endpoint};AccountKey={key}{trailing}")
    assert (account.endpoint, account.key) == (endpoint, key)


@given(host=hosts, key=keys, emulator=st.booleans())
def test_a_service_bus_string_names_its_host_and_whether_it_is_the_emulator(
    host: str, key: str, emulator: bool
) -> None:
    flag = ";UseDevelopmentEmulator=true" if emulator else ""
    parsed = parse_service_bus(f"Endpoint=sb://{host}/;SharedAccessKeyName=Root;SharedAccessKey={key}{flag}")
    assert (parsed.host, parsed.emulator) == (host, emulator)


@given(key=keys.filter(lambda k: len(k) >= 8), scheme=st.sampled_from(["ftp", "", "sb"]))
def test_a_refused_string_never_shows_its_key(key: str, scheme: str) -> None:
    endpoint = f"{scheme}://x" if scheme else "x"
    with pytest.raises(ConnectionStringError) as err:
        parse_cosmos(f"AccountEndpoint={endpoint};AccountKey={key}")
    assert key not in str(err.value)
    with pytest.raises(ConnectionStringError) as err:
        parse_service_bus(f"Endpoint=https://x;SharedAccessKeyName=Root;SharedAccessKey={key}")
    assert key not in str(err.value)


def test_keys_are_case_insensitive_as_in_the_sdks() -> None:
    parsed = parse_service_bus("endpoint=sb://ns.servicebus.windows.net/;sharedaccesskeyname=k;sharedaccesskey=v")
    assert parsed.host == "ns.servicebus.windows.net" and not parsed.emulator
    assert parse_cosmos("accountendpoint=https://a:1/;accountkey=k").key == "k"
