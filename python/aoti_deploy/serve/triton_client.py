"""Requests to a running tritonserver: its HTTP endpoints (the repository index,
readiness, statistics, a model's config, loading and unloading) read with urllib, and
inference through tritonclient (HTTP or gRPC, binary tensors)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import AotiDeployError
from .triton_config import DATATYPES, INPUT_PREFIX, OUTPUT_PREFIX, TensorNames
from .triton_install import require_triton_client

if TYPE_CHECKING:
    import torch

INFER_TIMEOUT_S = 120.0  # one request, however long the model


class ServingError(AotiDeployError):
    """The server did not start, exited, timed out, or a model did not load or answer."""


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


def server_live(http_url: str) -> bool:
    """GET /v2/health/live is 200 (within a second)."""
    return _request(f"{http_url}/v2/health/live", timeout=1.0)[0] == 200


def model_ready(http_url: str, model: str) -> bool:
    """GET /v2/models/<model>/ready is 200."""
    return _request(f"{http_url}/v2/models/{model}/ready")[0] == 200


def control_model(http_url: str, model: str, action: str) -> None:
    """POST /v2/repository/models/<model>/<action>: ``load`` (or reload) or
    ``unload`` a model; explicit model-control mode only.

    Raises:
        ServingError: Triton refused, with its message.
    """
    status, body = _request(f"{http_url}/v2/repository/models/{model}/{action}", "POST", timeout=300.0)
    if status != 200:
        raise ServingError(f"could not {action} model {model}: HTTP {status}: {body.decode(errors='replace')}")


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
    return TensorNames.of_config(json.loads(body))


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
    return TensorNames.of_config(config)


def _output_index(name: str, names: TensorNames | None) -> int:
    if names is not None:
        return names.outputs.index(name) if name in names.outputs else 1 << 30
    suffix = name.removeprefix(OUTPUT_PREFIX)
    return int(suffix) if name.startswith(OUTPUT_PREFIX) and suffix.isdigit() else 1 << 30


def _as_returned(tensor: torch.Tensor, index: int, names: TensorNames | None) -> torch.Tensor:
    """A response tensor in the package's shape: [batch, 1] back to [batch] for an output
    the config reshapes, and [1] back to [] for a Python scalar output (the same bytes)."""
    if names is not None and index in names.reshaped_outputs and tensor.dim() == 2 and tensor.shape[1] == 1:
        return tensor.reshape(tensor.shape[0])
    if names is not None and index in names.scalar_outputs and tensor.shape == (1,):
        return tensor.reshape(())
    return tensor


def infer(
    url_or_client: Any, protocol: str, model: str, inputs: Sequence[torch.Tensor], names: TensorNames | None = None
) -> list[torch.Tensor]:
    """One inference request: ``inputs`` sent under the model's input names (binary
    data over HTTP), every output returned (binary), in the order of its output names.
    Tensors are in the package's shapes: one that is only its batch dim ([batch], which
    the config reshapes) travels as [batch, 1] and comes back as [batch]; a Python
    scalar output travels as a one-element tensor [1] and comes back 0-d.

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
            if names is not None and i in names.reshaped_inputs and tensor.dim() == 1:
                tensor = tensor.unsqueeze(-1)
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
        return [_as_returned(_to_torch(result.as_numpy(name), datatype), _output_index(name, names), names)
                for name, datatype in described]
    finally:
        if owned:
            client.close()
