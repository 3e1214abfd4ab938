"""Everything a run starts: the supplier stub, the Cosmos DB test server (``--store cosmos``), the alert
sink and one or two hosts on one data folder. It kills and restarts hosts and remembers when each was
down (the kill windows), and tells the driver which host is up.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

from chaos.alert_sink import AlertSink
from chaos.config import HOST_ENV, MODEL_ENV, MODEL_MIX, ChaosConfig
from chaos.disorder import Outage
from chaos.evidence import KillWindow, StoreOutage
from chaos.journal import Journal
from chaos.outage import ProcessPause, SqliteLockHolder
from chaos.processes import HostProcess, SupplierProcess
from devhost.model_stub import ModelStub, Script, settings_for


class Cluster:
    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.workdir = config.data
        self.data = self.workdir / "data"
        self.supplier = SupplierProcess(self.workdir, config.app_dir)
        self.journal = Journal(self.supplier.journal)
        self.alerts = AlertSink()
        self.hosts: list[HostProcess] = []
        self.kill_windows: list[KillWindow] = []
        self.store_env: dict[str, str] = {}
        self._cosmos: object | None = None
        self.model: ModelStub | None = None
        """``--model stub``: the stand-in model, in this process (the hosts are killed, it is not)."""
        self._up: list[bool] = []
        self._lock = threading.Lock()
        self.outages: list[StoreOutage] = []
        self._outage: SqliteLockHolder | ProcessPause | None = None

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        if self.workdir.exists():
            shutil.rmtree(self.workdir)  # a fresh data folder: evidence from an earlier run would mislead
        self.data.mkdir(parents=True)
        self.supplier.start()
        self.alerts.start()
        if self.config.store == "cosmos":
            self.store_env = self._start_cosmos()
        model_env: dict[str, str] = {}
        if self.config.model == "stub":
            self.model = ModelStub(api_key="chaos-model-key", script=Script(mix=MODEL_MIX, seed=self.config.seed))
            model_env = {**settings_for(self.model.start(), "chaos-stub"), **MODEL_ENV}
        env = {
            **HOST_ENV,
            **model_env,
            **self.store_env,
            "SUPPLIER_PORTAL_URL": self.supplier.url,
            "ALERT_WEBHOOK_URL": self.alerts.url,
        }
        self.hosts = [
            HostProcess(i, self.workdir, self.data, self.config.app_dir, env) for i in range(self.config.hosts)
        ]
        self._up = [False] * len(self.hosts)
        for i, host in enumerate(self.hosts):
            host.start()
            self._up[i] = True

    def _start_cosmos(self) -> dict[str, str]:
        from devhost.cosmos_server import make_cosmos_store, start_cosmos_server

        server = start_cosmos_server()
        self._cosmos = server
        database = f"chaos{uuid.uuid4().hex[:10]}"
        with warnings.catch_warnings():
            # The SDK skips TLS checks for the loopback test server, and urllib3 warns on every request.
            warnings.simplefilter("ignore")
            make_cosmos_store(server, database).close()  # the database and its containers
        return {
            "CASEKEEPER_STORE": "cosmos",
            "CosmosDBConnection__accountEndpoint": server.endpoint,
            "COSMOS_KEY": server.key,
            "COSMOS_DATABASE": database,
        }

    def stop(self) -> None:
        if self._outage is not None:  # never leave the store locked or the server paused
            self._outage.end()
            self._outage = None
        for host in self.hosts:
            host.stop()
        self.supplier.stop()
        if self.model is not None:
            self.model.stop()
        with contextlib.suppress(Exception):
            self.alerts.stop()
        if self._cosmos is not None:
            self._cosmos.stop()  # type: ignore[attr-defined]
            self._cosmos = None

    # --- store outages -----------------------------------------------------------------------------

    @property
    def store_down(self) -> bool:
        """An outage is on (the driver holds back its reads of cases meanwhile)."""
        return self._outage is not None

    def store_outage(self, planned: Outage, until: float, wait: Callable[[float], object]) -> StoreOutage:
        """Take the store down now, until monotonic time ``until`` (``wait(seconds)``: the caller's
        stoppable sleep), then bring it back; the outage as it happened. Raises
        :class:`~chaos.outage.OutageError` when it cannot be started."""
        seconds = max(0.0, until - time.monotonic())
        if self.config.store == "cosmos":
            assert self._cosmos is not None
            outage: SqliteLockHolder | ProcessPause = ProcessPause(self._cosmos.process.pid)  # type: ignore[attr-defined]
            kind = "cosmos-sigstop"
        else:
            outage, kind = SqliteLockHolder(self.data / "casekeeper.sqlite"), "sqlite-write-lock"
        start = outage.begin(seconds)
        self._outage = outage
        try:
            wait(max(0.0, until - time.monotonic()))
        finally:
            self._outage = None
            end = outage.end()
        record = StoreOutage(kind, start, end, planned.start, planned.end)
        self.outages.append(record)
        return record

    # --- hosts ------------------------------------------------------------------------------------

    def url(self, index: int) -> str:
        return self.hosts[index].url

    def pick(self, preferred: int) -> int | None:
        """``preferred`` if it is up, else another host that is up, else ``None``."""
        with self._lock:
            order = [preferred, *(i for i in range(len(self.hosts)) if i != preferred)]
            return next((i for i in order if self._up[i]), None)

    def kill(self, index: int, *, restart_after: float, mode: str, detail: str = "") -> KillWindow:
        """``kill -9`` host ``index``'s process group, wait ``restart_after``, restart it on the same data.
        The kill window lasts until the restarted host answers its health check."""
        host = self.hosts[index]
        with self._lock:
            self._up[index] = False
        start = time.time()
        host.kill()
        time.sleep(restart_after)
        host.start()
        window = KillWindow(index, start, time.time(), mode, detail)
        with self._lock:
            self._up[index] = True
            self.kill_windows.append(window)
        return window

    def ensure_hosts_up(self) -> None:
        """Restart any host that died by itself (that is a finding too: its log says why)."""
        for i, host in enumerate(self.hosts):
            if not host.alive:
                start = time.time()
                with self._lock:
                    self._up[i] = False
                host.start()
                with self._lock:
                    self._up[i] = True
                    self.kill_windows.append(KillWindow(i, start, time.time(), "died", "exited by itself"))

    def operator_env(self) -> dict[str, str]:
        """Settings for ``casekeeper ... --from-settings`` when the store is Cosmos DB."""
        return {
            **HOST_ENV,
            **self.store_env,
            "CASEKEEPER_QUEUE": "local",
            "CASEKEEPER_LOCAL_QUEUE_PATH": str(self.data / "queue.sqlite"),
        }

    @property
    def queue_path(self) -> Path:
        return self.data / "queue.sqlite"

    def last_failures(self, message_ids: set[str]) -> dict[str, str]:
        """The hosts' last log line saying why each message failed: a hint beside a dead letter."""
        found: dict[str, str] = {}
        if not message_ids:
            return found
        for host in self.hosts:
            try:
                lines = host.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                if " failed (" in line and "message " in line:
                    message_id = line.split("message ", 1)[1].split(" failed (", 1)[0]
                    if message_id in message_ids:
                        found[message_id] = line
        return found
