"""The adapter imports only what it uses of the ``kubernetes`` client (kubectl_kvreset/kube/
``client_parts``), and the rest of the package still works when something asks for it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_selective_import_leaves_models_and_apis_out() -> None:
    out = run("""
        import sys
        from kubectl_kvreset import kube
        parts = kube.client_parts()
        mods = sorted(m for m in sys.modules if m.startswith("kubernetes"))
        assert parts.selective, "the pinned client must take the selective path"
        assert "kubernetes.client.models" not in sys.modules, mods
        assert "kubernetes.client.api_client" not in sys.modules, mods
        assert len(mods) < 20, mods
        # the OIDC refresh's session class (and requests under it) load only when called
        assert "requests_oauthlib" not in sys.modules and "requests" not in sys.modules
        session = parts.kube_config.OAuth2Session(client_id="c")
        import requests_oauthlib
        assert type(session) is requests_oauthlib.OAuth2Session and session.client_id == "c"
        c = parts.Configuration()
        assert hasattr(parts.kube_config, "KubeConfigLoader") and hasattr(parts.incluster, "InClusterConfigLoader")
        print(len(mods))
    """)
    assert int(out) < 20


def test_modules_used_on_rare_paths_load_when_asked_for() -> None:
    # urllib3, oauthlib and multiprocessing are imported at the top of the client's modules but
    # used only for basic auth, the OIDC refresh's error and a pool size: stand-ins until then
    out = run("""
        import sys
        from kubectl_kvreset import kube
        parts = kube.client_parts()
        c = parts.Configuration()
        import os
        assert c.connection_pool_maxsize == os.cpu_count() * 5
        left = [m for m in ("urllib3", "oauthlib", "multiprocessing", "requests_oauthlib") if m in sys.modules]
        assert not left, left
        # the basic-auth header comes from the real urllib3, imported now
        assert parts.kube_config.urllib3.util.make_headers(basic_auth="u:p") == {"authorization": "Basic dTpw"}
        import urllib3
        assert urllib3.__file__ and not getattr(urllib3, "__kvreset_stand_in__", False)
        # the OIDC refresh's error class, through oauthlib's submodule
        err = parts.kube_config.oauthlib.oauth2.rfc6749.errors.InvalidClientIdError
        import oauthlib.oauth2
        assert err is oauthlib.oauth2.rfc6749.errors.InvalidClientIdError
        print("ok")
    """)
    assert out == "ok"


def test_the_rest_of_the_package_loads_on_demand() -> None:
    # code that asks the package for more than the adapter imported gets the real thing
    run("""
        from kubectl_kvreset import kube
        kube.client_parts()
        from kubernetes import client
        assert client.CoreV1Api.__name__ == "CoreV1Api"
        assert client.ApiClient(client.Configuration()).configuration is not None
        import kubernetes
        assert kubernetes.__version__.startswith("36.")
        from kubernetes.stream import stream
        assert callable(stream)
    """)


def test_falls_back_to_a_plain_import_when_the_layout_differs() -> None:
    # a client whose configuration module moved: the adapter imports the whole package instead
    run("""
        import importlib, sys
        real = importlib.import_module
        def moved(name, *a, **k):
            if name == "kubernetes.client.configuration" and "kubernetes.client.models" not in sys.modules:
                raise ImportError("moved")
            return real(name, *a, **k)
        importlib.import_module = moved
        from kubectl_kvreset import kube
        parts = kube.client_parts()
        assert not parts.selective
        assert "kubernetes.client.models" in sys.modules
        assert parts.Configuration().api_key == {}
    """)


def test_connect_builds_one_context_and_a_bounded_pool(tmp_path) -> None:
    import yaml

    from kubectl_kvreset.kube import Kube, KubeFlags

    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
           "users": [{"name": "u", "user": {"token": "t0k"}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(cfg))
    kube = Kube.connect(KubeFlags(kubeconfig=str(path)), pool_size=5)
    assert kube.pool_size == 5 and kube.user_name == "u"
    transport = kube._transport
    assert transport.keep_alive is not None and transport._pool is None  # urllib3 only when asked for
    assert transport.ssl_context is not None and transport.pool.connection_pool_kw["maxsize"] == 5
    assert transport.pool.connection_pool_kw["block"] is True
    assert transport.pool.connection_pool_kw["ssl_context"] is transport.ssl_context
    assert kube._auth_headers() == {"Authorization": "Bearer t0k"}
