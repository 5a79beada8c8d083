"""Dagster's default run launcher, with run workers that run monitoring can check: a run whose worker died with its code
server (the deployment killed) is failed within a poll, its pools released and its hours asked again."""


from __future__ import annotations

import json

import yaml
from dagster import DagsterEventType, DefaultRunLauncher
from dagster._core.errors import DagsterLaunchFailedError, DagsterUserCodeUnreachableError
from dagster._core.instance.ref import InstanceRef
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import GRPC_INFO_TAG
from dagster._grpc.types import ExecuteExternalJobArgs, GetCurrentRunsResult, StartRunResult
from dagster._serdes import ConfigurableClassData, deserialize_value

from dev_services.processes import command_line, is_alive

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", ""}


# A code server that is alive fails the runs of its own dead workers itself; Dagster's default launcher cannot tell the
# daemon about the workers of a code server that is gone, so run monitoring never looks at started runs.


class WatchedRunLauncher(DefaultRunLauncher):
    """Launches runs as Dagster's default launcher does (on the code server), handing each run's process the tables it
    carries so that it builds only those of the catalog (`run_instance_ref`), and answers run monitoring's health
    check: the run's worker is alive when the code server that started it still runs it, or, that server gone, while
    its process (on this host) is."""

    def launch_run(self, context) -> None:
        from dagster._core.remote_representation.code_location import GrpcServerCodeLocation

        run = context.dagster_run
        origin = run.remote_job_origin
        location = context.workspace.get_code_location(origin.repository_origin.code_location_origin.location_name)
        if not isinstance(location, GrpcServerCodeLocation):
            super().launch_run(context)
            return
        client = location.client
        # As Dagster's launcher starts a run on its code server, with the run's own instance reference.
        self._instance.add_run_tags(run.run_id, {GRPC_INFO_TAG: json.dumps(
            {"host": client.host, **({"port": client.port} if client.port else {"socket": client.socket}),
             **({"use_ssl": True} if client.use_ssl else {})})})
        started = deserialize_value(client.start_run(ExecuteExternalJobArgs(
            job_origin=origin, run_id=run.run_id, instance_ref=run_instance_ref(self._instance, run))), StartRunResult)
        if not started.success:
            raise DagsterLaunchFailedError(started.message, serializable_error_info=started.serializable_error_info)
        self._run_ids.add(run.run_id)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        client = self._get_grpc_client_for_termination(run.run_id)
        if client is None:
            # Not started by a code server this launcher knows of, or already finished: nothing to judge by.
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no code server recorded for the run")
        where = run.tags.get(GRPC_INFO_TAG, "")
        try:
            current = deserialize_value(client.get_current_runs(), GetCurrentRunsResult).current_runs
        except DagsterUserCodeUnreachableError:
            pid = self._worker_pid(run.run_id)
            if pid is not None and _is_local(where) and _process_alive(pid):
                return CheckRunHealthResult(WorkerStatus.RUNNING,
                                            f"its code server {where} is gone, its worker (pid {pid}) still runs")
            return CheckRunHealthResult(
                WorkerStatus.FAILED, f"the code server that started the run ({where}) is gone, and its run worker "
                f"{f'(pid {pid}) ' if pid else ''}with it: the deployment was stopped or killed while the run went on")
        if run.run_id in current:
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        # A live code server fails the runs of its own workers that died, and then forgets them; one that never knew
        # the run is a new server at the old address.
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"the code server at {where} does not run it: it was restarted while the run went on")

    def _worker_pid(self, run_id: str) -> int | None:
        """The pid of the run's worker, from its "Started process for run" event."""
        for entry in self._instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
            data = entry.dagster_event.engine_event_data if entry.dagster_event else None
            pid = data.metadata.get("pid") if data is not None else None
            if pid is not None and str(pid.value).isdigit():
                return int(pid.value)
        return None


def _is_local(grpc_info: str) -> bool:
    try:
        info = json.loads(grpc_info)
    except ValueError:
        return False
    return "socket" in info or info.get("host", "") in _LOCAL_HOSTS


def _process_alive(pid: int) -> bool:
    """Alive and a Python process (a reused pid of something else is not the worker)."""
    return is_alive(pid) and any("python" in word for word in command_line(pid)[:1])


def run_instance_ref(instance, run) -> InstanceRef:
    """The instance reference a run's process is handed: the deployment's, naming the tables the run carries when it
    selects assets of the platform's layers (`<layer>/<database>/<table>`) and the instance takes them (`run_tables` of
    deploy/event_batches.BatchingInstance); otherwise the deployment's own, and the process builds the whole catalog."""
    ref = instance.get_ref()
    custom = ref.custom_instance_class_data
    keys = set(run.asset_selection or ()) | {check.asset_key for check in run.asset_check_selection or ()}
    if custom is None or custom.class_name != "BatchingInstance" or not run.asset_selection or any(
            len(key.path) != 3 for key in keys):
        return ref
    tables = sorted({f"{key.path[1]}/{key.path[2]}" for key in keys})
    config = {**(yaml.safe_load(custom.config_yaml) or {}), "run_tables": tables}
    return ref._replace(custom_instance_class_data=ConfigurableClassData(custom.module_name, custom.class_name,
                                                                         yaml.safe_dump(config)))
