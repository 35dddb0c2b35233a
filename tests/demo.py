"""``make demo``: start the simulated cluster with the demo prefill/decode deployment, run
``detect``, ``clear --all --yes`` and ``metrics`` through the built zipapp (as
``kubectl kvreset`` when kubectl is on PATH), print what they print, stop the cluster.

It says which mode the simulator runs in: with a working bubblewrap (``bwrap``) each
container's command runs in a sandbox and the vLLM argv it execs is recorded; without one
nothing is run and the servers' ports and flags are read from the manifests (tests/sim/pods.py).
Either way every tier ends emptied. Nothing is ever installed: the demo never calls a package
manager or ``sudo`` (``.ci/run`` installs bubblewrap for the test suite on CI machines)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.simctl import DEMO_MANIFEST, SimCluster, sandbox_available, zipapp_path


def main() -> int:
    """Run the demo; returns the exit code of the last failing step (0 when all succeed)."""
    app = zipapp_path()
    if not app.exists():
        print(f"{app} is missing: run make build", file=sys.stderr)
        return 2
    if sandbox_available():
        print("mode: sandbox (bubblewrap runs each container's command; the simulator records the vLLM "
              "command it execs)", flush=True)
    else:
        print("mode: no sandbox (bubblewrap is missing or cannot create namespaces: container commands "
              "are not run, the servers' ports and flags are read from the manifests; nothing is "
              "installed)", flush=True)
    print("starting the simulated cluster with tests/manifests/demo-pd.yaml ...", flush=True)
    with SimCluster([DEMO_MANIFEST], namespace="llm-d-demo") as sim:
        sim.wait_ready()
        env = sim.env()
        env["PATH"] = f"{app.parent}{os.pathsep}{env.get('PATH', '')}"
        base = ["kubectl", "kvreset"] if shutil.which("kubectl", path=env["PATH"]) else [str(app)]
        worst = 0
        for args in (["detect", "-n", "llm-d-demo"],
                     ["clear", "-n", "llm-d-demo", "--all", "--yes"],
                     ["metrics", "-n", "llm-d-demo"]):
            print(f"\n$ {' '.join(base[:2] if base[0] == 'kubectl' else ['kubectl-kvreset'])} {' '.join(args)}",
                  flush=True)
            done = subprocess.run(base + args, env=env, stdin=subprocess.DEVNULL, text=True, capture_output=True,
                                  timeout=300)
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            print(f"(exit {done.returncode})", flush=True)
            worst = worst or done.returncode
    print("\nsimulated cluster stopped", flush=True)
    return worst


if __name__ == "__main__":
    sys.exit(main())
