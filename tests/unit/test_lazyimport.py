"""kubectl_kvreset/lazyimport.py: a library's submodule imported without its package's
``__init__``, and the whole package still there for code that asks for it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_metrics_parser_without_the_package_init() -> None:
    out = run("""
        import sys
        from kubectl_kvreset.lazyimport import prometheus_parser
        parser = prometheus_parser()
        fams = list(parser.text_string_to_metric_families("# TYPE a_total counter\\na_total{x=\\"1\\"} 3\\n"))
        assert [(f.name, f.type, f.samples[0].value) for f in fams] == [("a", "counter", 3.0)]
        # the exposition servers and the default registry were not imported
        assert "prometheus_client.exposition" not in sys.modules
        assert "prometheus_client.registry" not in sys.modules
        # asking the package for what its __init__ defines still works, then
        import prometheus_client
        assert prometheus_client.Counter.__name__ == "Counter"
        print("ok")
    """)
    assert out == "ok"


def test_an_imported_package_is_used_as_it_is() -> None:
    out = run("""
        import prometheus_client
        from kubectl_kvreset.lazyimport import prometheus_parser
        import prometheus_client.parser as real
        assert prometheus_parser() is real
        print("ok")
    """)
    assert out == "ok"


def test_a_missing_package_raises_import_error() -> None:
    out = run("""
        from kubectl_kvreset.lazyimport import submodule
        try:
            submodule("no_such_package_kvreset", "parser")
        except ImportError:
            print("ok")
    """)
    assert out == "ok"
