"""Golden tests: known inputs pinned to known keys (rule R1).

If one of these fails, a refactor changed the key encoding. Every effect recorded before it would
then get a new key and could be sent to the supplier again. Do not update the expected values;
revert the change, or add a new key kind.
"""

import hashlib

import pytest

from casekeeper.core.keys import approval_request_id, args_digest, canonical_json, effect_key

GOLDEN_EFFECT_KEYS = [
    (("INV-1001", "request_credit_note", 1), "d3e49e9aaab1e237ced95e30dbf76ef6715d283609eb995e54270d3856427fc2"),
    (("INV-1001", "request_credit_note", 2), "b19b302b758046362e1de8a664d9b46c5ccc5d1bb47132ddd0e4d270b7444227"),
    (("case/ü", "a", 0), "7e67387f7d72e23a223d7cf976cf497651b91fe01f466e92323a668fd45b574b"),
]


@pytest.mark.parametrize(("args", "expected"), GOLDEN_EFFECT_KEYS)
def test_effect_key_is_pinned(args: tuple[str, str, int], expected: str) -> None:
    assert effect_key(*args) == expected


def test_effect_key_is_sha256_of_the_canonical_encoding() -> None:
    # The encoding spelled out by hand, so the test does not share code with what it checks.
    raw = b'{"action":"request_credit_note","caseId":"INV-1001","caseVersion":1,"kind":"effect"}'
    assert effect_key("INV-1001", "request_credit_note", 1) == hashlib.sha256(raw).hexdigest()


def test_a_part_joins_the_key_and_none_leaves_it_exactly_as_it_was() -> None:
    raw = b'{"action":"refund","caseId":"T1","caseVersion":1,"kind":"effect","part":"L2"}'
    assert effect_key("T1", "refund", 1, "L2") == hashlib.sha256(raw).hexdigest()
    assert effect_key("T1", "refund", 1, None) == effect_key("T1", "refund", 1)
    assert effect_key("T1", "refund", 1, "L1") != effect_key("T1", "refund", 1, "L2")
    with pytest.raises(ValueError):
        effect_key("T1", "refund", 1, "")


def test_the_argument_digest_is_sha256_of_the_canonical_encoding() -> None:
    assert args_digest({"b": "2", "a": "1"}) == hashlib.sha256(b'{"a":"1","b":"2"}').hexdigest()


def test_approval_request_id_is_pinned() -> None:
    assert approval_request_id("INV-1001", "request_credit_note", 3) == "apr-c623e77cfe1d1fc3428c21786bfd42abf3395b6e"


def test_every_input_moves_the_key() -> None:
    base = effect_key("c", "a", 1)
    assert len({base, effect_key("c2", "a", 1), effect_key("c", "a2", 1), effect_key("c", "a", 2)}) == 4
    assert effect_key("c", "a", 1) != approval_request_id("c", "a", 1)[4:]


def test_canonical_json_sorts_keys_and_fixes_separators() -> None:
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'.encode()
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


@pytest.mark.parametrize(
    ("case_id", "action", "version"), [("", "a", 1), ("c", "", 1), ("c", "a", -1), ("c", "a", True)]
)
def test_bad_key_inputs_are_refused(case_id: str, action: str, version: int) -> None:
    with pytest.raises(ValueError):
        effect_key(case_id, action, version)
