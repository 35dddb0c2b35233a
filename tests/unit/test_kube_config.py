"""kubectl's kubeconfig merge and override rules, as the adapter applies them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubectl_kvreset.kube import (
    KubeConfigError,
    KubeFlags,
    apply_overrides,
    is_apiserver_status,
    kubeconfig_paths,
    merge_kubeconfigs,
    parse_duration,
)


def write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def cfg(ctx: str, server: str, ns: str | None = None, ca: str | None = None) -> dict:
    cluster = {"server": server}
    if ca:
        cluster["certificate-authority"] = ca
    context = {"cluster": ctx, "user": ctx}
    if ns:
        context["namespace"] = ns
    return {"current-context": ctx, "clusters": [{"name": ctx, "cluster": cluster}],
            "users": [{"name": ctx, "user": {"token": f"tok-{ctx}"}}],
            "contexts": [{"name": ctx, "context": context}]}


def test_first_file_wins_current_context_like_kubectl(tmp_path: Path) -> None:
    a = write(tmp_path / "a", cfg("a", "https://a:6443"))
    b = write(tmp_path / "b", cfg("b", "https://b:6443"))
    merged = merge_kubeconfigs([a, b])
    assert merged["current-context"] == "a"
    assert [c["name"] for c in merged["contexts"]] == ["a", "b"]


def test_first_file_wins_for_a_name_defined_twice(tmp_path: Path) -> None:
    a = write(tmp_path / "a", cfg("x", "https://first:6443"))
    b = write(tmp_path / "b", cfg("x", "https://second:6443"))
    merged = merge_kubeconfigs([a, b])
    assert merged["clusters"] == [{"name": "x", "cluster": {"server": "https://first:6443"}}]


def test_relative_ca_path_resolves_against_its_file(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    a = write(sub / "a", cfg("a", "https://a:6443", ca="ca.crt"))
    merged = merge_kubeconfigs([a])
    assert merged["clusters"][0]["cluster"]["certificate-authority"] == str(sub / "ca.crt")


def test_kubeconfig_env_list_skips_missing_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a", cfg("a", "https://a"))
    env = {"KUBECONFIG": f"{tmp_path / 'missing'}:{a}:{a}", "HOME": str(tmp_path)}
    assert kubeconfig_paths(None, env) == [a]
    assert kubeconfig_paths("/x/y", env) == [Path("/x/y")]


def test_overrides_namespace_context_server_token(tmp_path: Path) -> None:
    merged = merge_kubeconfigs([write(tmp_path / "a", cfg("a", "https://a", ns="team"))])
    out, ctx, ns = apply_overrides(merged, KubeFlags())
    assert (ctx, ns) == ("a", "team")
    assert out["users"][0]["user"] == {"token": "tok-a"}
    out, _, ns = apply_overrides(merged, KubeFlags(namespace="other", server="https://o", token="t2",
                                                   insecure_skip_tls_verify=True))
    assert ns == "other"
    assert out["clusters"][0]["cluster"] == {"server": "https://o", "insecure-skip-tls-verify": True}
    assert out["users"][0]["user"] == {"token": "t2"}


def test_unknown_context_is_a_config_error_naming_it(tmp_path: Path) -> None:
    merged = merge_kubeconfigs([write(tmp_path / "a", cfg("a", "https://a"))])
    with pytest.raises(KubeConfigError, match='context "nope" does not exist'):
        apply_overrides(merged, KubeFlags(context="nope"))


def test_namespace_defaults_to_default(tmp_path: Path) -> None:
    merged = merge_kubeconfigs([write(tmp_path / "a", cfg("a", "https://a"))])
    assert apply_overrides(merged, KubeFlags())[2] == "default"


@pytest.mark.parametrize("text,seconds", [(None, 30.0), ("0", None), ("45", 45.0), ("1m30s", 90.0), ("500ms", 0.5),
                                          ("2h", 7200.0)])
def test_parse_duration(text: str | None, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_rejects_garbage() -> None:
    with pytest.raises(KubeConfigError, match="invalid duration"):
        parse_duration("soon")


def test_status_body_is_told_apart_from_a_vllm_answer() -> None:
    status = (b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":"x",'
              b'"reason":"ServiceUnavailable","code":503}')
    assert is_apiserver_status(status, {"content-type": "application/json"})
    assert not is_apiserver_status(b'{"detail":"Not Found"}', {"content-type": "application/json"})
    assert not is_apiserver_status(b"Internal Server Error", {"content-type": "text/plain"})


def test_redact_hides_tokens() -> None:
    from kubectl_kvreset.redact import MASK, redact_text

    # an Authorization header is masked to the end of its line: the others on a line of their own
    text = redact_text("Authorization: Bearer abc.def-123 and\ntoken: s3cr3t, password=hunter2")
    assert "abc.def-123" not in text and "s3cr3t" not in text and "hunter2" not in text
    assert text.count(MASK) >= 3
