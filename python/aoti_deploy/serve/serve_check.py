"""The check aoti-deploy serve runs: seeded random inputs (and special values) sent to
each served model over HTTP and gRPC at once, each response compared bit for bit with
the inputs (an identity) or with the Python runtime's outputs for the same bundle."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .triton_client import ServingError, infer
from .triton_config import TensorNames

if TYPE_CHECKING:
    import torch

    from ..verify.bits import BitReport
    from .served_models import ServedModel
    from .triton_server import TritonServer


@dataclass(frozen=True)
class RequestCheck:
    """One request's outputs against their references, bit for bit."""

    model: str
    protocol: str
    label: str  # what the inputs were, e.g. "random seed 3 [1, 3, 224, 224]"
    reference: str  # "inputs" (an identity) or "Python runtime"
    reports: tuple[BitReport, ...] = ()
    # How each report's output is named: "output 'scores'" when the model returns its
    # outputs by name, else "output[0]" (verify/tolerance.py's output_labels).
    outputs: tuple[str, ...] = ()
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
    from ..verify.tolerance import output_labels

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
                check, reports=tuple(compare_bits(actual, wanted) for actual, wanted in zip(outputs, expected)),
                outputs=tuple(output_labels(model.spec, len(outputs))),
            )

        with ThreadPoolExecutor(max_workers=min(len(sets), 8)) as pool:
            for check in pool.map(one, range(len(sets))):
                checks.append(check)
                if on_check is not None:
                    on_check(check)
    return checks
