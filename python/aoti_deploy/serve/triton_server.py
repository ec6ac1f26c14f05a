"""A tritonserver process (pytriton's bundled server, the triton extra) on loopback
ports with this project's backend directory, the client calls that talk to it
(tritonclient, HTTP or gRPC, binary tensors), and the check aoti-deploy serve runs: the
served model's outputs against the inputs (an identity) or the Python runtime's."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import AotiDeployError
from .loopback import LOOPBACK, LoopbackProcess, free_ports
from .triton_repository import INPUT_PREFIX, OUTPUT_PREFIX, ServedModel, served_name

if TYPE_CHECKING:
    import torch

    from ..verify.bits import BitReport

TRITON_EXTRA = "pip install -e '.[triton]' (nvidia-pytriton, tritonclient[http,grpc])"
_LOG_TAIL_LINES = 25
INFER_TIMEOUT_S = 120.0  # one request, however long the model


class TritonUnavailableError(AotiDeployError):
    """The triton extra (pytriton's tritonserver, tritonclient) is not installed."""


class ServingError(AotiDeployError):
    """The server did not start, exited, timed out, or a model did not load or answer."""


def tritonserver_binary() -> Path:
    """pytriton's bundled Triton server, found without importing pytriton.

    Raises:
        TritonUnavailableError: nvidia-pytriton is not installed, or has no server.
    """
    found = importlib.util.find_spec("pytriton")
    if found is None or not found.submodule_search_locations:
        raise TritonUnavailableError(f"Triton Inference Server is not installed; install the triton extra: {TRITON_EXTRA}")
    for location in found.submodule_search_locations:
        binary = Path(location) / "tritonserver" / "bin" / "tritonserver"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    raise TritonUnavailableError(
        f"pytriton is installed at {', '.join(found.submodule_search_locations)} but holds no executable "
        f"tritonserver/bin/tritonserver; reinstall the triton extra: {TRITON_EXTRA}"
    )


def require_triton_client() -> None:
    """Raises TritonUnavailableError when tritonclient (HTTP and gRPC) is missing."""
    for module in ("tritonclient.http", "tritonclient.grpc"):
        try:
            missing = importlib.util.find_spec(module) is None
        except ModuleNotFoundError:
            missing = True
        if missing:
            raise TritonUnavailableError(f"{module} is not installed; install the triton extra: {TRITON_EXTRA}")


class ModelState(NamedTuple):
    """A model version's state in the repository index (READY, UNAVAILABLE, LOADING,
    ...) and, for one that failed to load, the reason."""

    name: str
    version: str
    state: str
    reason: str


def _request(url: str, method: str = "GET", timeout: float = 5.0) -> tuple[int, bytes]:
    """(HTTP status, body); a refused connection is status 0."""
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""


def model_states(http_url: str) -> list[ModelState]:
    """Every model version in the server's repository index (POST /v2/repository/index):
    its state and, for one that failed to load, Triton's reason.

    Raises:
        ServingError: the server did not answer.
    """
    status, body = _request(f"{http_url}/v2/repository/index", "POST")
    if status != 200:
        raise ServingError(f"the server at {http_url} did not list its models (HTTP {status}: {body[:200]!r})")
    return [
        ModelState(item.get("name", ""), str(item.get("version", "")), item.get("state", ""), item.get("reason", ""))
        for item in json.loads(body)
    ]


def model_ready(http_url: str, model: str) -> bool:
    """GET /v2/models/<model>/ready is 200."""
    return _request(f"{http_url}/v2/models/{model}/ready")[0] == 200


class ModelStatistics(NamedTuple):
    inference_count: int  # items inferred (a batch of 4 counts 4)
    execution_count: int  # model executions (a batch Triton formed counts 1)


def model_statistics(http_url: str, model: str) -> ModelStatistics:
    """The model's totals over all versions (GET /v2/models/<model>/stats).

    Raises:
        ServingError: the server did not answer.
    """
    status, body = _request(f"{http_url}/v2/models/{model}/stats")
    if status != 200:
        raise ServingError(f"no statistics for model {model} at {http_url} (HTTP {status}: {body[:200]!r})")
    stats = json.loads(body).get("model_stats", [])
    return ModelStatistics(
        sum(int(item.get("inference_count", 0)) for item in stats),
        sum(int(item.get("execution_count", 0)) for item in stats),
    )


class TensorNames(NamedTuple):
    """The names a model's requests use for its inputs and outputs, in the package's
    order: the names its config declares (the spec's recorded names, else INPUT__i and
    OUTPUT__i)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, model: ServedModel) -> "TensorNames":
        """A repository model's names, in its package's order. The backend loads a model
        only when its config declares exactly these (cpp_runtime/triton/model_config.cpp)."""
        spec = model.spec
        return cls(
            tuple(served_name(spec.inputs, i, INPUT_PREFIX) for i in range(len(spec.inputs))),
            tuple(served_name(spec.outputs, k, OUTPUT_PREFIX) for k in range(len(spec.outputs))),
        )


def model_tensor_names(http_url: str, model: str) -> TensorNames:
    """A served model's input and output names, in its config's order (GET
    /v2/models/<model>/config); a config written by aoti-deploy triton-repository lists
    them in the package's order.

    Raises:
        ServingError: the server did not answer, or has no such model.
    """
    status, body = _request(f"{http_url}/v2/models/{model}/config")
    if status != 200:
        raise ServingError(f"no config for model {model} at {http_url} (HTTP {status}: {body[:200]!r})")
    config = json.loads(body)
    return TensorNames(
        tuple(str(item.get("name", "")) for item in config.get("input", [])),
        tuple(str(item.get("name", "")) for item in config.get("output", [])),
    )


class TritonServer(LoopbackProcess):
    """A tritonserver process bound to 127.0.0.1. Stopped by its PID (SIGTERM, then
    SIGKILL), on ``stop`` or on leaving a ``with`` block::

        with TritonServer().start(repository, backend_dir=triton_backend_dir(), log_file=log) as server:
            server.wait_ready(60, models=["identity_conv"])
            infer(server.http_url, "http", "identity_conv", [x])
    """

    error = ServingError
    not_started = "the server was not started"

    def __init__(self, binary: str | os.PathLike[str] | None = None) -> None:
        super().__init__(Path(binary) if binary is not None else tritonserver_binary())
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.command: list[str] = []

    def start(
        self,
        repository: str | os.PathLike[str],
        *,
        backend_dir: str | os.PathLike[str],
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        log_file: str | os.PathLike[str],
        model_control_explicit: bool = False,
        extra_args: Sequence[str] = (),
        die_with_parent: bool = True,
        env: dict[str, str] | None = None,
    ) -> "TritonServer":
        """Launch tritonserver on ``repository`` (ports left None are picked with
        ``free_ports``), its stdout and stderr appended to ``log_file``. A model that
        fails to load does not stop it (--exit-on-error=false; Triton's default is to
        exit). It runs in its own session (a Ctrl-C in the terminal is this process's to
        handle); with ``die_with_parent`` the kernel also sends it SIGTERM when this
        process ends, however it ends (PR_SET_PDEATHSIG), so no server outlives a
        killed test run. Without, it outlives this process if not stopped (--keep).
        ``env`` adds to (or overrides) this process's environment for the server, e.g.
        TMPDIR, where the backend's loaders extract packages.

        Returns:
            self, started (not yet ready: see ``wait_ready``).

        Raises:
            ServingError: already started, or the process could not be launched.
        """
        if self.process is not None:
            raise ServingError(f"this server was already started (pid {self.process.pid})")
        given = {port for port in (http_port, grpc_port, metrics_port) if port}
        picked = iter([port for port in free_ports(6) if port not in given])
        self.http_port = http_port or next(picked)
        self.grpc_port = grpc_port or next(picked)
        self.metrics_port = metrics_port or next(picked)
        self.log_file = Path(log_file)
        self.command = [
            str(self.binary),
            f"--model-repository={Path(repository).resolve()}",
            f"--backend-directory={Path(backend_dir).resolve()}",
            f"--http-address={LOOPBACK}",
            f"--http-port={self.http_port}",
            f"--grpc-address={LOOPBACK}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={LOOPBACK}",
            f"--metrics-port={self.metrics_port}",
            "--exit-on-error=false",
            *(["--model-control-mode=explicit"] if model_control_explicit else []),
            *extra_args,
        ]
        self._launch(self.command, die_with_parent=die_with_parent, env=env)
        return self

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """host:port, as tritonclient.grpc takes it."""
        return f"{LOOPBACK}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the server's log."""
        if self.log_file is None or not self.log_file.is_file():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def _exited(self, what: str) -> ServingError:
        code = self.process.returncode if self.process is not None else None
        return ServingError(
            f"tritonserver exited (code {code}) {what}; the end of its log {self.log_file}:\n{self.log_tail()}",
            kind="exited",
        )

    def wait_ready(self, timeout: float = 60.0, models: Sequence[str] = ()) -> None:
        """Wait until the server is live (GET /v2/health/live) and each of ``models`` is
        ready. Live, not /v2/health/ready: with Triton's strict readiness (kept, so a
        probe sees a broken model) one model that failed to load keeps the server
        unready, while the others serve.

        Raises:
            ServingError: the process exited (with its log's tail), a model is
                unavailable (with Triton's reason), or ``timeout`` seconds passed.
        """
        deadline = time.monotonic() + timeout
        pending = list(models)
        live = False
        while True:
            if not self.running():
                raise self._exited("before it was ready")
            if not live:
                live = _request(f"{self.http_url}/v2/health/live", timeout=1.0)[0] == 200
            if live:
                pending = [model for model in pending if not model_ready(self.http_url, model)]
                if not pending:
                    return
                for state in model_states(self.http_url):
                    if state.name in pending and state.state == "UNAVAILABLE":
                        raise ServingError(
                            f"model {state.name} (version {state.version}) did not load: {state.reason or 'no reason given'} "
                            f"(server log: {self.log_file})",
                            kind="model_unavailable",
                        )
            if time.monotonic() > deadline:
                waiting = f"models {', '.join(pending)} to be ready" if live else "the server to be live"
                raise ServingError(
                    f"timed out after {timeout:g} s waiting for {waiting} at {self.http_url}; the end of its log "
                    f"{self.log_file}:\n{self.log_tail()}",
                    kind="timeout",
                )
            time.sleep(0.1)

    def load_model(self, model: str) -> None:
        """Load (or reload) a model; explicit model-control mode only.

        Raises:
            ServingError: Triton refused, with its message.
        """
        self._control(model, "load")

    def unload_model(self, model: str) -> None:
        self._control(model, "unload")

    def _control(self, model: str, action: str) -> None:
        status, body = _request(f"{self.http_url}/v2/repository/models/{model}/{action}", "POST", timeout=300.0)
        if status != 200:
            raise ServingError(f"could not {action} model {model}: HTTP {status}: {body.decode(errors='replace')}")

    def rss_bytes(self) -> int:
        """The server's resident memory (VmRSS of /proc/PID/status)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise ServingError(f"no VmRSS in /proc/{self.pid}/status")

    def open_fds(self) -> int:
        """How many file descriptors the server holds open (entries of /proc/PID/fd)."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def mapped_objects(self) -> list[str]:
        """The files mapped into the server (from /proc/PID/maps), sorted, each once; a
        deleted file keeps the kernel's " (deleted)" suffix."""
        paths = set()
        for line in Path(f"/proc/{self.pid}/maps").read_text().splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                paths.add(parts[5])
        return sorted(paths)



# --- Inference through tritonclient ----------------------------------------------------


def _to_numpy(tensor: torch.Tensor) -> Any:
    import torch

    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        # numpy has no bfloat16; tritonclient takes ml_dtypes' (its dependency), same bits.
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _to_torch(array: Any, datatype: str) -> torch.Tensor:
    import numpy as np
    import torch

    if datatype == "BF16":
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(array, copy=True))


def _datatype(tensor: torch.Tensor) -> str:
    from ..package.dtypes import dtype_name
    from .triton_repository import DATATYPES

    name = dtype_name(tensor.dtype)
    if name not in DATATYPES:
        raise AotiDeployError(f"cannot send a {name} tensor to Triton; supported: {', '.join(DATATYPES)}", kind="usage")
    return DATATYPES[name]


def _config_names(client: Any, protocol: str, model: str) -> TensorNames | None:
    """The names the model's config declares, in its order, through ``client``; None
    when the server gives no config (the request then fails with the server's reason)."""
    from tritonclient.utils import InferenceServerException

    try:
        if protocol == "http":
            config = client.get_model_config(model)
        else:
            config = client.get_model_config(model, as_json=True, client_timeout=INFER_TIMEOUT_S).get("config", {})
    except (InferenceServerException, OSError):
        return None
    return TensorNames(
        tuple(str(item.get("name", "")) for item in config.get("input", [])),
        tuple(str(item.get("name", "")) for item in config.get("output", [])),
    )


def _output_index(name: str, names: TensorNames | None) -> int:
    if names is not None:
        return names.outputs.index(name) if name in names.outputs else 1 << 30
    suffix = name.removeprefix(OUTPUT_PREFIX)
    return int(suffix) if name.startswith(OUTPUT_PREFIX) and suffix.isdigit() else 1 << 30


def infer(
    url_or_client: Any, protocol: str, model: str, inputs: Sequence[torch.Tensor], names: TensorNames | None = None
) -> list[torch.Tensor]:
    """One inference request: ``inputs`` sent under the model's input names (binary
    data over HTTP), every output returned (binary), in the order of its output names.

    Args:
        url_or_client: "http://host:port" or "host:port" (a client is made and closed
            for this call), or a tritonclient client of ``protocol``.
        protocol: "http" or "grpc".
        model: the model name.
        inputs: CPU or device tensors; bfloat16 goes through ml_dtypes, bit for bit.
        names: the model's names (``TensorNames.of``, ``model_tensor_names``); None:
            the names its config declares, asked of the server first (one more
            request; pass them to time requests alone), else INPUT__0, INPUT__1, ...
            and OUTPUT__0, ...

    Returns:
        The outputs as CPU tensors.

    Raises:
        ServingError: the server refused or failed the request (its message).
        TritonUnavailableError: tritonclient is not installed.
    """
    require_triton_client()
    if protocol == "http":
        import tritonclient.http as client_module
    elif protocol == "grpc":
        import tritonclient.grpc as client_module
    else:
        raise AotiDeployError(f"protocol must be http or grpc, got {protocol!r}", kind="usage")
    from tritonclient.utils import InferenceServerException

    owned = isinstance(url_or_client, str)
    client = client_module.InferenceServerClient(url_or_client.removeprefix("http://")) if owned else url_or_client
    try:
        if names is None:
            names = _config_names(client, protocol, model)
        requests = []
        for i, tensor in enumerate(inputs):
            name = names.inputs[i] if names is not None and i < len(names.inputs) else f"{INPUT_PREFIX}{i}"
            request = client_module.InferInput(name, list(tensor.shape), _datatype(tensor))
            array = _to_numpy(tensor)
            if protocol == "http":
                request.set_data_from_numpy(array, binary_data=True)
            else:
                request.set_data_from_numpy(array)
            requests.append(request)
        try:
            # gRPC waits forever by default; HTTP's own network timeout is 60 s.
            result = client.infer(model, requests, **({"client_timeout": INFER_TIMEOUT_S} if protocol == "grpc" else {}))
        except InferenceServerException as error:
            raise ServingError(f"{protocol} inference on model {model} failed: {error.message()}", kind="infer") from error
        except OSError as error:  # the server went away: refused or reset connections
            raise ServingError(f"{protocol} inference on model {model} failed: {error}", kind="infer") from error
        response = result.get_response()
        if protocol == "http":
            described = [(output["name"], output["datatype"]) for output in response.get("outputs", [])]
        else:
            described = [(output.name, output.datatype) for output in response.outputs]
        described.sort(key=lambda item: _output_index(item[0], names))
        return [_to_torch(result.as_numpy(name), datatype) for name, datatype in described]
    finally:
        if owned:
            client.close()


# --- The check aoti-deploy serve runs ---------------------------------------------------


@dataclass(frozen=True)
class RequestCheck:
    """One request's outputs against their references, bit for bit."""

    model: str
    protocol: str
    label: str  # what the inputs were, e.g. "random seed 3 [1, 3, 224, 224]"
    reference: str  # "inputs" (an identity) or "Python runtime"
    reports: tuple[BitReport, ...] = ()
    error: str = ""  # the request failed, or the output count differs

    @property
    def passed(self) -> bool:
        return not self.error and all(report.identical for report in self.reports)


class RequestSet(NamedTuple):
    label: str  # e.g. "random seed 3 [1, 3, 224, 224]"
    inputs: list[torch.Tensor]
    special: bool  # special values: checked against the Python runtime, even for an identity


def request_inputs(model: ServedModel, requests: int) -> list[RequestSet]:
    """The inputs aoti-deploy serve sends: ``requests`` seeded random sets at the package's
    example shapes, drawn as the runners draw random inputs (runtime/random_inputs.py:
    integer inputs within their recorded value ranges, else 0 or 1, so no request
    can abort a kernel), and, when every input is floating point with room for them,
    one set of special values (NaN payloads, -0.0, infinities, subnormals).

    Raises:
        InputError: an input of a dtype with no random values (complex, float8).
    """
    import torch

    from ..package.dtypes import dtype_from_name
    from ..runtime.random_inputs import random_cpu_inputs, random_input_shapes
    from ..verify.special_values import SPECIAL_BITS, special_values

    spec = model.spec
    shapes = random_input_shapes(spec)
    dtypes = [dtype_from_name(t.dtype) for t in spec.inputs]
    shown = " ".join(str(list(shape)) for shape in shapes)
    sets = [
        RequestSet(f"random seed {seed} {shown}", random_cpu_inputs(spec, seed), special=False)
        for seed in range(requests)
    ]
    if all(dtype in SPECIAL_BITS and torch.Size(shape).numel() >= len(SPECIAL_BITS[dtype])
           for shape, dtype in zip(shapes, dtypes)):
        tensors = [special_values(shape, dtype, seed=i) for i, (shape, dtype) in enumerate(zip(shapes, dtypes))]
        sets.append(RequestSet(f"special values {shown}", tensors, special=True))
    return sets


# The op libraries PythonReference loaded into this process: file name -> SHA-256.
# Each model's bundle holds its own copy, and a library cannot load twice.
_reference_libraries: dict[str, str] = {}


def _load_reference_libraries(model: str, libraries: Sequence[Path]) -> None:
    """Load a bundle's op libraries, skipping each one already loaded from another
    bundle with the same bytes.

    Raises:
        ServingError: a library of the same name but other bytes is already loaded.
        OpLibraryError: loading failed.
    """
    import hashlib

    from ..ops.loader import load_op_libraries

    needed = []
    for library in libraries:
        digest = hashlib.sha256(library.read_bytes()).hexdigest()
        loaded = _reference_libraries.get(library.name)
        if loaded is None:
            needed.append((library, digest))
        elif loaded != digest:
            raise ServingError(
                f"model {model}'s {library.name} differs from the one loaded for another model in this process; "
                "check one model at a time (--model NAME)",
                kind="usage",
            )
    load_op_libraries([library for library, _ in needed])
    _reference_libraries.update({library.name: digest for library, digest in needed})


class PythonReference:
    """The served bundle run in this process by the Python runtime, under the trust
    policy its config gives the backend (its trusted_key, if any). Close it."""

    def __init__(self, model: ServedModel) -> None:
        from contextlib import ExitStack

        from ..runtime.aoti import load_package
        from ..runtime.trust import FLAG_SOURCE, TrustPolicy, open_model

        self._cleanup = ExitStack()
        try:
            policy = TrustPolicy(model.trusted_key, FLAG_SOURCE) if model.trusted_key else TrustPolicy()
            opened = self._cleanup.enter_context(open_model(model.bundle, policy))
            _load_reference_libraries(model.name, opened.op_libraries)
            self.package = self._cleanup.enter_context(load_package(opened.package, opened.spec))
        except BaseException:
            self._cleanup.close()
            raise

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [output.cpu() for output in self.package.run([x.to(self.package.spec.device) for x in inputs])]

    def close(self) -> None:
        self._cleanup.close()


def check_served_model(
    server: TritonServer,
    model: ServedModel,
    requests: int = 8,
    protocols: Sequence[str] = ("http", "grpc"),
    on_check: Callable[[RequestCheck], None] | None = None,
) -> list[RequestCheck]:
    """Send ``request_inputs`` over each protocol, concurrently (so the dynamic batcher
    can merge them), and compare each response's outputs bit for bit with the inputs
    (random inputs to an identity package) or with the Python runtime's outputs for
    the same inputs (any other package, and special values: native layers may quiet a
    signalling NaN or flush a subnormal, which the package then does in every runtime).

    Args:
        on_check: called with each check as it completes, for progress.

    Raises:
        ServingError, TritonUnavailableError; the Python runtime's errors (loading the
        reference).
    """
    from ..verify.bits import compare_bits

    sets = request_inputs(model, requests)
    by_inputs = [model.spec.is_identity and not request.special for request in sets]
    references: list[list[torch.Tensor]] = [request.inputs for request in sets]
    if not all(by_inputs):
        reference = PythonReference(model)
        try:
            references = [
                request.inputs if identity else reference.run(request.inputs)
                for request, identity in zip(sets, by_inputs)
            ]
        finally:
            reference.close()
    url = {"http": server.http_url, "grpc": server.grpc_url}
    names = TensorNames.of(model)
    checks: list[RequestCheck] = []
    for protocol in protocols:

        def one(index: int, protocol: str = protocol) -> RequestCheck:
            request, expected = sets[index], references[index]
            check = RequestCheck(model.name, protocol, request.label, "inputs" if by_inputs[index] else "Python runtime")
            try:
                outputs = infer(url[protocol], protocol, model.name, request.inputs, names)
            except ServingError as error:
                return dataclasses.replace(check, error=str(error))
            if len(outputs) != len(expected):
                return dataclasses.replace(
                    check, error=f"the server returned {len(outputs)} output(s), the {check.reference} {len(expected)}"
                )
            return dataclasses.replace(
                check, reports=tuple(compare_bits(actual, wanted) for actual, wanted in zip(outputs, expected))
            )

        with ThreadPoolExecutor(max_workers=min(len(sets), 8)) as pool:
            for check in pool.map(one, range(len(sets))):
                checks.append(check)
                if on_check is not None:
                    on_check(check)
    return checks
