"""The floor of one ``clear --all``: the least any client must do, timed by the bench as a whole
process (interpreter start included): one TLS connection, one pod list, one reset through the
pod proxy. Standard library only, so nothing but the interpreter's own start-up is paid.

usage: python3 floor_client.py SERVER TOKEN CAFILE NAMESPACE SELECTOR PORT
prints the pods listed and the reset's HTTP status; exit 0 when the reset answered 200.
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
from urllib.parse import quote, urlsplit


def main(argv: list[str]) -> int:
    """Run the floor request sequence; returns the exit status."""
    server, token, cafile, namespace, selector, port = argv
    url = urlsplit(server)
    ctx = ssl.create_default_context(cafile=cafile)
    conn = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port or 443, context=ctx, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    conn.request("GET", f"/api/v1/namespaces/{quote(namespace)}/pods?labelSelector={quote(selector)}",
                 headers=headers)
    pods = json.loads(conn.getresponse().read())["items"]
    if not pods:
        return 1
    name = pods[0]["metadata"]["name"]
    conn.request("POST", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}:{port}/proxy/reset_prefix_cache",
                 headers=headers, body=b"")
    resp = conn.getresponse()
    resp.read()
    print(len(pods), resp.status)
    return 0 if resp.status == 200 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
