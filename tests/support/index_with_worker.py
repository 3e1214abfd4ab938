"""Run the Functions Python worker's own indexing over function_app.py (Python 3.13, azure-functions-runtime).

Run with the 3.13 interpreter: ``python tests/support/index_with_worker.py [APP_FILE]``. Prints one JSON line:
the indexed function names, or the worker's error. The worker's gRPC ``protos`` module is only needed
for three enum values, so a stand-in with those fields is enough (the worker's own tests do the same).
"""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
# The Python this check runs on (`make setup` builds .venv313 with it). It is the newest version the
# function app is known to index on, so infra/main.bicep deploys it by default (tests/unit/test_infra.py).
WORKER_PYTHON = "3.13"


def main() -> int:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != WORKER_PYTHON:
        print(json.dumps({"error": f"this check runs on Python {WORKER_PYTHON}, not {running}"}))
        return 1
    app_file = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "function_app.py"
    sys.path.insert(0, str(app_file.parent))
    sys.path.insert(1, str(ROOT))
    from azure_functions_runtime.bindings.meta import load_binding_registry
    from azure_functions_runtime.functions import Registry
    from azure_functions_runtime.loader import index_function_app

    load_binding_registry()  # what the worker does at start-up, before indexing

    protos = SimpleNamespace(BindingInfo=SimpleNamespace(**{"in": 0, "out": 1, "inout": 2, "undefined": 3}))
    try:
        functions = index_function_app(str(app_file))
        registry = Registry()
        names = []
        for fn in functions:
            registry.add_indexed_function(fn, protos)
            names.append(fn.get_function_name())
    except Exception as exc:  # the test prints what the worker refused
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps({"functions": sorted(names)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
