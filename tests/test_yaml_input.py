"""Bounded YAML input (shared.yaml_input): size, depth and alias expansion, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth_cli.tasks import TaskError, load_managed_job
from berth_cli.writing import prepare_workloads
from shared.config import ConfigError, load_documents
from shared.yaml_input import MAX_BYTES, YamlInputError, load_all, read_input
from tests.conftest import berth


def laughs(levels: int = 9) -> str:
    """The classic "billion laughs": each level holds nine aliases of the one before."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        aliases = ",".join([f"*l{level - 1}"] * 9)
        lines.append(f"l{level}: &l{level} [{aliases}]")
    return "\n".join(lines) + "\n"


CASES = [
    # (text, message or None when accepted, why)
    ("a: 1\n---\nb: [1, 2]\n", None, "plain multi-document YAML"),
    ("base: &b {cpu: 1}\njob: *b\nother: {<<: *b, memory: 2}\n", None, "a few aliases and a merge key are fine"),
    (laughs(), "its aliases expand it beyond 4 MiB", "billion laughs (1 KB that stands for 10^9 nodes)"),
    ("[" * 200 + "]" * 200, "nested deeper than 100 levels", "pathological nesting"),
    ("a: &a [*a]\n", "an alias refers to the node that contains it", "a recursive alias"),
    ("when: 2024-13-45\n", "invalid YAML value: month must be in 1..12", "PyYAML's bare ValueError for a bad date"),
    ("a: !!int nope\n", "invalid YAML value", "an explicit tag on a bad scalar"),
    ("a: !!python/object:os.system x\n", "malformed YAML", "no Python objects from safe YAML"),
    ("key: [unclosed\n", "malformed YAML at line 2", "a syntax error names its line"),
    ("a: \x07\n", "malformed YAML", "a control character"),
]


@pytest.mark.parametrize(("text", "message", "why"), CASES)
def test_load_all(text: str, message: str | None, why: str) -> None:
    if message is None:
        assert load_all(text, source="f.yaml"), why
        return
    with pytest.raises(YamlInputError, match=message) as raised:
        load_all(text, source="f.yaml")
    assert str(raised.value).startswith("f.yaml: "), why
    assert "\n" not in str(raised.value), why


# (text, the first document, why): keys as kubectl's YAML-to-JSON spells them
KEY_CASES = [
    ("on: x\n", {"true": "x"}, "YAML 1.1's `on` is a bool: its key is `true`"),
    ("no: x\n", {"false": "x"}, "and `no` is `false`"),
    ("null: x\n", {"null": "x"}, "a null key is `null`"),
    ("1: x\n2.5: y\n", {"1": "x", "2.5": "y"}, "a number's key is its text"),
    ("a: {b: {on: x}}\n", {"a": {"b": {"true": "x"}}}, "at any depth"),
    ("base: &b {1: x}\nc: {<<: *b}\n", {"base": {"1": "x"}, "c": {"1": "x"}}, "through a merge"),
    ("'on': x\n", {"on": "x"}, "a quoted key stays the string it is"),
]


@pytest.mark.parametrize(("text", "loaded", "why"), KEY_CASES, ids=[c[2] for c in KEY_CASES])
def test_every_key_is_a_string(text: str, loaded: dict[str, object], why: str) -> None:
    assert load_all(text, source="f.yaml") == [loaded], why


def test_a_workload_with_a_yaml_1_1_key_is_submitted_not_a_traceback(tmp_path: Path) -> None:
    """A label `on: x` in a Job: JSON has no bool keys, so the object became unencodable
    (a TypeError traceback at `berth submit`); its key is `true` now, as with kubectl."""
    job = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: keyed
  labels: {on: x, kueue.x-k8s.io/queue-name: q}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, resources: {requests: {cpu: "1"}}}]
"""
    [prepared] = prepare_workloads([(load_documents(job, source="j.yaml"), "j.yaml")], namespace=None)
    assert prepared[0]["metadata"]["labels"]["true"] == "x"


def test_aliases_deep_through_anchors_count_as_nesting() -> None:
    """Depth counts once aliases are expanded: 60 levels inside an anchor, used 60 levels
    deep, nest 120 levels."""
    inner = "[" * 60 + "]" * 60
    outer = "[" * 60 + "*a" + "]" * 60
    with pytest.raises(YamlInputError, match="once its aliases are expanded"):
        load_all(f"a: &a {inner}\nb: {outer}\n", source="f.yaml")


@pytest.mark.parametrize(
    ("data", "message", "why"),
    [
        (b"a: 1\n" * (MAX_BYTES // 5 + 1), "larger than 1 MiB, the limit for one file", "over 1 MiB"),
        (b"name: \xff\n", r"not UTF-8 text \(byte 0xff at offset 6\)", "not UTF-8"),
    ],
)
def test_read_input_bounds_the_file(tmp_path: Path, data: bytes, message: str, why: str) -> None:
    path = tmp_path / "in.yaml"
    path.write_bytes(data)
    with pytest.raises(YamlInputError, match=message):
        read_input(str(path))


def test_a_missing_file_is_named() -> None:
    with pytest.raises(YamlInputError, match=r"cannot read /nonexistent/x\.yaml: No such file"):
        read_input("/nonexistent/x.yaml")


def test_every_user_loader_goes_through_the_bounds() -> None:
    """The config and workload loader and the SkyPilot task loader refuse billion laughs."""
    with pytest.raises(ConfigError, match=r"x\.yaml: its aliases expand it beyond 4 MiB"):
        load_documents(laughs(), source="x.yaml")
    with pytest.raises(TaskError, match=r"t\.yaml: its aliases expand it beyond 4 MiB"):
        load_managed_job(laughs(), source="t.yaml")


@pytest.mark.parametrize("command", [["submit", "-f"], ["apply", "-f"], ["jobs", "launch"]])
def test_the_cli_refuses_billion_laughs_in_one_line(tmp_path: Path, command: list[str]) -> None:
    """Once 3.4 GB and minutes; now one line and a non-zero exit (nothing is contacted)."""
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs())
    result = berth(*command, str(path), url="nats://127.0.0.1:1", check=False, timeout=20)
    assert result.returncode != 0
    assert f"{path}: its aliases expand it beyond 4 MiB" in result.stderr
    assert "Traceback" not in result.stderr


_YAMLISH = st.text(alphabet=st.sampled_from(list("ab1:-&*[]{}!,'\"\n #<>|.?%@`\t\\")), max_size=80)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(_YAMLISH, st.text(max_size=60)))
def test_fuzz_the_loader_raises_only_its_own_error(text: str) -> None:
    """Any text: documents, or YamlInputError; never another exception."""
    try:
        load_all(text, source="fuzz.yaml")
    except YamlInputError as error:
        assert "\n" not in str(error)
