"""The redaction rules (kubectl_kvreset/redact.py): what is masked and what must stay."""

from __future__ import annotations

import json

import pytest

from kubectl_kvreset.redact import MASK, is_secret_name, redact_argv, redact_text, redact_url, redact_value
from kubectl_kvreset.report import Column, Report

S = "s3cr3tVALUE"


@pytest.mark.parametrize("flag", ["--hf-token", "--api-key", "--admin-api-key", "--token", "--oidc-client-secret",
                                  "--redis-password", "--ssl-keyfile-password", "--my-auth-token", "-token"])
def test_secret_flag_values_are_masked_in_both_forms(flag: str) -> None:
    assert redact_argv(["vllm", "serve", "m", flag, S, "--port", "8000"]) == ["vllm", "serve", "m", flag, MASK,
                                                                              "--port", "8000"]
    assert redact_argv([f"{flag}={S}"]) == [f"{flag}={MASK}"]


def test_what_is_not_secret_stays() -> None:
    argv = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096", "--kv-cache-dtype", "fp8",
            "--enable-prefix-caching", "--max-num-batched-tokens", "8192", "--long-prefill-token-threshold", "512",
            "--tokenizer", "org/tok", "--tokenizer-mode", "auto", "--port", "8000", "--block-size", "16"]
    assert redact_argv(argv) == argv


def test_boolean_secret_named_flags_keep_the_next_flag() -> None:
    # a secret-named flag followed by another flag (or last) has no value to mask
    assert redact_argv(["--enable-api-key", "--port", "8000"]) == ["--enable-api-key", "--port", "8000"]
    assert redact_argv(["serve", "--api-key"]) == ["serve", "--api-key"]


def test_json_arguments_are_redacted_field_by_field_at_any_depth() -> None:
    ktc = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
           "kv_connector_extra_config": {"lmcache.api_key": S, "chunk_size": 256,
                                         "a": {"b": [{"password": S, "keep": "x"}]},
                                         "lmcache.remote_url": f"redis://u:{S}@h:6379"}}
    for argv in (["--kv-transfer-config", json.dumps(ktc)], [f"--kv-transfer-config={json.dumps(ktc)}"]):
        out = redact_argv(argv)
        assert S not in "".join(out)
        assert out[-1].startswith("--kv-transfer-config") or out[0] == "--kv-transfer-config"
        doc = json.loads(out[-1].partition("=")[2] if "=" in out[-1][:25] else out[-1])
        extra = doc["kv_connector_extra_config"]
        assert doc["kv_connector"] == "LMCacheConnectorV1" and extra["chunk_size"] == 256
        assert extra["lmcache.api_key"] == MASK and extra["a"]["b"][0] == {"password": MASK, "keep": "x"}
        assert extra["lmcache.remote_url"] == f"redis://u:{MASK}@h:6379"


def test_url_passwords() -> None:
    assert redact_url(f"redis://user:{S}@redis:6379/0") == f"redis://user:{MASK}@redis:6379/0"
    assert redact_url(f"rediss://:{S}@redis:6380") == f"rediss://:{MASK}@redis:6380"
    assert redact_url(f"redis://{S}@redis") == f"redis://{MASK}@redis"
    assert redact_url("redis://redis.ns.svc:6379") == "redis://redis.ns.svc:6379"
    text = f"from where redis://a:{S}@h:1 is reachable; then mooncakestore://m:{S}@x:50051"
    assert S not in redact_url(text) and "h:1" in redact_url(text) and "x:50051" in redact_url(text)


def test_text_forms() -> None:
    for text in (f"HF_TOKEN={S}", f"token={S} refreshed", f"Authorization: Bearer {S}", f'"api_key": "{S}"',
                 f"client-key-data: {S}", f"password: {S}", f"sh -c 'vllm serve m --api-key {S} --port 1'",
                 f"--oidc-client-secret={S}", f"{{'secret': '{S}'}}"):
        assert S not in redact_text(text), text
    for text in ("GET /api/v1/pods 200 in 3 ms", "--max-model-len 4096", "keys: 12", "key_count=3",
                 "deleted 12 keys of org/model@*", "redis://redis:6379", "the basic layout of a pod"):
        assert redact_text(text) == text, text


def test_secret_names() -> None:
    for name in ("HF_TOKEN", "VLLM_API_KEY", "lmcache.api_key", "client-key-data", "password", "valkey_password",
                 "--hf-token", "authorization", "oidc-client-secret"):
        assert is_secret_name(name), name
    for name in ("key_count", "valkey", "--max-num-batched-tokens", "--tokenizer", "--kv-transfer-config",
                 "--kv-cache-dtype", "max_tokens", "keys"):
        assert not is_secret_name(name), name


def test_values_env_and_kubeconfig_shapes() -> None:
    env = [{"name": "HF_TOKEN", "value": S}, {"name": "VLLM_SERVER_DEV_MODE", "value": "1"}]
    # env as a mapping and as the pod spec's EnvVar list
    assert S not in json.dumps(redact_value({"env": {e["name"]: e["value"] for e in env}}))
    assert redact_value({"env": env}) == {"env": [{"name": "HF_TOKEN", "value": MASK}, env[1]]}
    user = {"token": S, "client-key-data": S, "client-certificate-data": "CERT", "exec": {"args": [f"--secret={S}"]}}
    out = redact_value(user)
    assert S not in json.dumps(out) and out["client-certificate-data"] == "CERT"
    secret = {"kind": "Secret", "data": {"password": S, "HF_TOKEN": S}}
    assert S not in json.dumps(redact_value(secret))
    # on/off and empty values say nothing and stay
    assert redact_value({"api_key": None, "token": False, "password": ""}) == {"api_key": None, "token": False,
                                                                               "password": ""}


def test_report_renders_every_format_redacted_and_keeps_its_rows() -> None:
    report = Report("VllmPod", [Column("POD", "pod"), Column("ARGV", "argv", wide=True), Column("URL", "url")])
    argv = ["vllm", "serve", "m", "--api-key", S]
    report.add({"pod": "p", "argv": argv, "url": f"redis://:{S}@r:6379"})
    for fmt in ("table", "wide", "json", "yaml"):
        assert S not in report.render(fmt), fmt
    assert "redis://:***@r:6379" in report.render("table")
    assert report.rows[0]["argv"] == argv  # the data the job works with is untouched


def test_a_json_argument_without_secrets_is_kept_byte_for_byte() -> None:
    arg = '{"kv_connector":"NixlConnector", "kv_role":"kv_both"}'
    assert redact_argv(["--kv-transfer-config", arg]) == ["--kv-transfer-config", arg]
    assert redact_argv([f"--kv-transfer-config={arg}"]) == [f"--kv-transfer-config={arg}"]


def test_every_value_of_a_list_flag_is_masked_up_to_the_next_flag() -> None:
    # vLLM's --api-key takes several keys (api_key: list[str] | None)
    argv = ["vllm", "serve", "m", "--api-key", "k1" + S, "k2" + S, "--port", "8000"]
    assert redact_argv(argv) == ["vllm", "serve", "m", "--api-key", MASK, MASK, "--port", "8000"]
    assert redact_argv(["serve", "--api-key", "a" + S, "b" + S]) == ["serve", "--api-key", MASK, MASK]
    script = f"sh -c 'vllm serve m --api-key k1{S} k2{S} --port 1'"
    assert S not in redact_text(script) and "--port 1" in redact_text(script)


def test_a_config_files_list_of_api_keys_is_masked() -> None:
    from kubectl_kvreset.engines.vllm.configfile import config_args

    args, _notes = config_args(f"port: 8000\napi-key: [a{S}, b{S}]\nmax-model-len: 4096\n", "/etc/vllm/c.yaml")
    out = redact_argv(["vllm", "serve", "m", "--config", "/etc/vllm/c.yaml", *args])
    assert S not in json.dumps(out) and "--max-model-len" in out and "4096" in out and "8000" in out


@pytest.mark.parametrize("name", ["auth", "pwd", "pass", "passwd", "credential", "credentials", "private_key",
                                  "access_key", "secret_access_key", "sas", "signature", "cookie", "session",
                                  "REDISCLI_AUTH", "REDIS_PASS", "DB_PWD", "MY_AUTH", "AWS_CREDENTIALS",
                                  "--requirepass", "--masterauth", "X-Amz-Signature", "privateKey", "lmcache:pwd"])
def test_more_secret_names(name: str) -> None:
    assert is_secret_name(name), name


@pytest.mark.parametrize("name", ["author", "passthrough", "pass_through", "bypass", "keyword",
                                  "max_num_batched_tokens", "key_count", "kv_cache_dtype", "PWD", "auth_mode",
                                  "session_timeout", "--tokenizer", "compass", "signal", "keys"])
def test_names_that_only_contain_a_secret_word_stay(name: str) -> None:
    assert not is_secret_name(name), name
    assert redact_value({name: "v"}) == {name: "v"}


def test_nested_json_keys_with_the_wider_names() -> None:
    doc = {"servers": [{"auth": "a" + S, "host": "h"}], "lmcache.x": {"pwd": "p" + S}, "author": "me",
           "pass_through": True, "max_num_batched_tokens": 8192}
    out = redact_value(doc)
    assert out == {"servers": [{"auth": MASK, "host": "h"}], "lmcache.x": {"pwd": MASK}, "author": "me",
                   "pass_through": True, "max_num_batched_tokens": 8192}
    assert S not in json.dumps(redact_argv(["--kv-transfer-config", json.dumps(doc)]))


def test_list_reprs_and_tracebacks() -> None:
    text = f"Command '['python3', 'p.py', '--api-key', 'k1{S}', 'k2{S}', '--port', '1']' timed out after 5 seconds"
    out = redact_text(text)
    assert S not in out and "'--port', '1'" in out and "'p.py'" in out
    assert S not in redact_text(f"{{'api-key': ['a{S}', 'b{S}'], 'port': 1}}")


def test_authorization_headers_and_passwords_to_the_end_of_their_field() -> None:
    out = redact_text(f"Authorization: Token api{S}; password: two words{S}")
    assert S not in out and "words" not in out
    assert S not in redact_text(f"proxy-authorization: Digest username=\"u\", response=\"{S}\"")
    assert S not in redact_text(f'{{"Authorization": "AWS4-HMAC-SHA256 Credential={S}, Signature={S}"}}')
    out = redact_text(f"password: two words{S}, user: bob")
    assert S not in out and "user: bob" in out
    assert redact_text("Authorization: <redacted>, Accept: application/json") == \
        "Authorization: <redacted>, Accept: application/json"
    out = redact_text(f"token=a{S} refreshed, password=b{S}")
    assert S not in out and "refreshed" in out


def test_urls_with_at_and_slash_in_the_password_and_secret_query_parameters() -> None:
    assert redact_url(f"redis://:p@ss{S}@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url(f"redis://:pa/ss{S}@host:6379") == "redis://:***@host:6379"
    url = f"https://acct.blob.example.com/c/o?sv=2020&auth=a{S}&sig=s{S}&token=t{S}&X-Amz-Signature=x{S}&se=1"
    out = redact_text(url)
    assert S not in out and "sv=2020" in out and "se=1" in out and "acct.blob.example.com/c/o" in out


def test_env_and_redis_flags() -> None:
    env = [{"name": n, "value": S} for n in ("REDISCLI_AUTH", "REDIS_PASS", "APP_PWD", "MY_AUTH", "GCP_CREDENTIALS")]
    assert S not in json.dumps(redact_value({"env": env}))
    for text in (f"REDISCLI_AUTH={S}", f"MY_AUTH={S}", f"redis-server --requirepass {S} --masterauth {S}"):
        assert S not in redact_text(text), text
    assert redact_argv(["redis-server", "--requirepass", S, "--port", "6379"]) == \
        ["redis-server", "--requirepass", MASK, "--port", "6379"]


def test_only_argv_shaped_lists_are_read_as_command_lines() -> None:
    notes = ["--config /etc/vllm/config.yaml: flags read from ConfigMap vcfg key config.yaml",
             "the second note stays"]
    row = {"notes": notes, "argv": ["vllm", "serve", "--api-key", S]}
    assert redact_value(row) == {"notes": notes, "argv": ["vllm", "serve", "--api-key", MASK]}


def test_the_v6_traceback_shows_frames_and_redacted_messages_never_code_or_locals() -> None:
    import subprocess

    from kubectl_kvreset.redact import redact_traceback

    def plugin() -> None:
        credential = ["python3", "p.py", "--api-key", "k1" + S, "k2" + S]
        try:
            raise subprocess.TimeoutExpired(credential, 5)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"Authorization: Token a{S}") from exc

    try:
        plugin()
    except RuntimeError as exc:
        text = redact_traceback(exc)
    assert S not in text
    assert "credential = " not in text and "raise " not in text  # no source lines
    assert f'File "{__file__}"' in text and ", in plugin" in text
    assert "subprocess.TimeoutExpired: Command" in text and "RuntimeError: Authorization: ***" in text
    assert "direct cause" in text and text.index("TimeoutExpired") < text.index("RuntimeError")


@pytest.mark.parametrize("flag", ["--hf-tok", "--hf-", "--api-ke", "--api", "--admin-api", "--admin", "--tok"])
def test_abbreviated_secret_flags_are_masked(flag: str) -> None:
    # vLLM's argparse parser takes an unambiguous prefix for the flag (allow_abbrev): --hf-tok
    # sets hf_token; an ambiguous one (--api, --tok) is masked too
    assert redact_argv(["vllm", "serve", "m", flag, S, "--port", "8000"]) == ["vllm", "serve", "m", flag, MASK,
                                                                              "--port", "8000"]
    assert redact_argv([f"{flag}={S}"]) == [f"{flag}={MASK}"]
    assert S not in redact_text(f"vllm serve m {flag} {S} --port 8000")
    assert S not in redact_text(f"['vllm', 'serve', '{flag}', '{S}']")
    assert S not in redact_value({"args": ["serve", flag, S]})


def test_prefixes_too_short_or_of_other_flags_stay() -> None:
    argv = ["vllm", "serve", "m", "--hf", "x", "--api-server-count", "2", "--tokenizer", "org/tok",
            "--ssl-keyfile", "/etc/tls/tls.key", "--allow-credentials", "--port", "8000"]
    assert redact_argv(argv) == argv
    assert redact_text(" ".join(argv)) == " ".join(argv)


def test_redis_cli_password_flags() -> None:
    assert redact_text(f"redis-cli -h r -a {S} ping") == f"redis-cli -h r -a {MASK} ping"
    assert redact_text(f"redis-cli -h r -a{S} ping") == f"redis-cli -h r -a{MASK} ping"
    # a long secret flag masks every word up to the next flag (vLLM's --api-key k1 k2)
    assert redact_text(f"valkey-cli --pass {S} -h r") == f"valkey-cli --pass {MASK} -h r"
    assert redact_argv(["redis-cli", "-a", S, "ping"]) == ["redis-cli", "-a", MASK, "ping"]
    assert redact_argv(["/usr/bin/redis-cli", f"-a{S}", "ping"]) == ["/usr/bin/redis-cli", f"-a{MASK}", "ping"]
    # --askpass reads the password from stdin: a boolean
    assert redact_argv(["redis-cli", "--askpass", "-h", "r"]) == ["redis-cli", "--askpass", "-h", "r"]
    # -a attached outside redis-cli is another program's short flags
    assert redact_text("ls -alh /mnt/kv") == "ls -alh /mnt/kv"


def test_curl_user_password() -> None:
    assert redact_text(f"curl -u admin:{S} http://h") == f"curl -u admin:{MASK} http://h"
    assert redact_text(f"curl -uadmin:{S} http://h") == f"curl -uadmin:{MASK} http://h"
    assert redact_text(f"curl --user 'admin:{S} x' http://h") == f"curl --user 'admin:{MASK}' http://h"
    assert redact_argv(["curl", "-u", f"admin:{S}", "http://h"]) == ["curl", "-u", f"admin:{MASK}", "http://h"]
    assert redact_argv(["curl", f"--user=admin:{S}"]) == ["curl", f"--user=admin:{MASK}"]
    assert redact_argv(["sudo", "-u", "root", "ls"]) == ["sudo", "-u", "root", "ls"]
    # redis-cli -u takes a URL: its password only, the host stays
    assert redact_text(f"redis-cli -u redis://default:{S}@h:6379 --scan") == \
        f"redis-cli -u redis://default:{MASK}@h:6379 --scan"
    assert redact_argv(["redis-cli", "-u", f"redis://default:{S}@h:6379"]) == \
        ["redis-cli", "-u", f"redis://default:{MASK}@h:6379"]
    assert redact_argv([f"-uredis://default:{S}@h:6379"]) == [f"-uredis://default:{MASK}@h:6379"]


@pytest.mark.parametrize("name", ["PGPASSWORD", "SSHPASS", "DOCKER_AUTH_CONFIG", "authtoken", "AccessToken"])
def test_program_secret_names_in_every_shape(name: str) -> None:
    assert is_secret_name(name)
    assert S not in redact_text(f"{name}={S} psql")
    assert S not in redact_text(f'{{"{name}": "{S}"}}')
    assert redact_value({name: S}) == {name: MASK}
    assert redact_value({"env": [{"name": name, "value": S}]}) == {"env": [{"name": name, "value": MASK}]}


def test_docker_auth_config_json_value_in_text() -> None:
    text = 'DOCKER_AUTH_CONFIG={"auths":{"reg.io":{"auth":"' + S + '"}}} started'
    assert redact_text(text) == f"DOCKER_AUTH_CONFIG={MASK} started"


def test_url_password_with_spaces() -> None:
    assert redact_url(f"rediss://:{S} with space@h:6380/0") == f"rediss://:{MASK}@h:6380/0"
    assert redact_url(f"redis://u:{S} x@h:6379") == f"redis://u:{MASK}@h:6379"
    # a port, or a URL followed by an address, stays
    assert redact_url("redis://redis:6379 owner ops@example.com") == "redis://redis:6379 owner ops@example.com"
    assert redact_url(f"redis://u:{S}@h:1 ops@example.com") == f"redis://u:{MASK}@h:1 ops@example.com"
