"""The CLI reads YAML with an API server's limits (qdd.yamlinput): nothing hangs or eats memory
before validation, and nothing is silently lost."""

from __future__ import annotations

import pytest

from qdd.yamlinput import MAX_BYTES, MAX_DEPTH, MAX_NODES, InputError, load_documents


def _bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines)


@pytest.mark.parametrize(("text", "message"), [
    (_bomb(9), f"more than {MAX_NODES} values once its aliases are expanded"),
    ("a: &a [1, *a]", "an alias refers to a value that contains it"),
    ("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
    ("x: " + "a" * MAX_BYTES, f"is more than the {MAX_BYTES} an API server stores"),
    ("cluster: {a: 1}\ncluster: {b: 2}", "line 2: key 'cluster' is given twice in one mapping"),
    ("a: [unclosed", "not valid YAML"),
])
def test_input_beyond_the_limits_is_refused_with_the_reason(text, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_documents(text)


def test_aliases_within_the_limits_and_merge_keys_still_load():
    docs = load_documents(_bomb(4) + "\nbase: &b {x: 1}\nderived: {<<: *b, w: 2}\n---\n---\nz: 1\n")
    assert len(docs) == 2 and docs[0]["derived"] == {"x": 1, "w": 2} and len(docs[0]["a3"]) == 10


def test_values_are_read_as_kubectl_reads_them():
    """sigs.k8s.io/yaml (kubectl) semantics, where PyYAML's YAML 1.1 rules differ."""
    [doc] = load_documents("a: 4096.0\nb: 4.096e3\nc: 0o10000\nd: y\ne: 68:16\nf: 2024-01-01\ng: 1_000\nh: 010\n"
                           "i: 0x1F\nk: 1e3\nl: null\nm: N\no: 1.5\ny: 1\n")
    assert doc == {"a": 4096, "b": 4096, "c": 4096, "d": True, "e": "68:16", "f": "2024-01-01", "g": 1000, "h": 8,
                   "i": 31, "k": 1000, "l": None, "m": False, "o": 1.5, "true": 1}
