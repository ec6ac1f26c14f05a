"""A client of a served package, with tritonclient alone: one request over HTTP and one
over gRPC to the model docs/triton.md serves, each output checked bit for bit against
the Python runtime on the same input. Tensors go by the model's own names (here ``x``
and ``output``; `aoti-deploy inspect PACKAGE` lists them).

    python examples/triton_client.py                      # localhost:8000 and :8001
    python examples/triton_client.py --http HOST:PORT --grpc HOST:PORT --model NAME --package PATH
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import aoti_deploy


def ask_http(url: str, model: str, x: np.ndarray) -> np.ndarray:
    with httpclient.InferenceServerClient(url) as client:
        request = httpclient.InferInput("x", list(x.shape), "FP32")
        request.set_data_from_numpy(x, binary_data=True)
        wanted = httpclient.InferRequestedOutput("output", binary_data=True)
        return client.infer(model, [request], outputs=[wanted]).as_numpy("output")


def ask_grpc(url: str, model: str, x: np.ndarray) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        request = grpcclient.InferInput("x", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        wanted = grpcclient.InferRequestedOutput("output")
        return client.infer(model, [request], outputs=[wanted], client_timeout=60).as_numpy("output")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", default="localhost:8000", help="the server's HTTP address")
    parser.add_argument("--grpc", default="localhost:8001", help="the server's gRPC address")
    parser.add_argument("--model", default="identity_conv", help="the model's name in the repository")
    parser.add_argument("--package", default="artifacts/model.pt2", help="the package the model serves")
    options = parser.parse_args()

    package = aoti_deploy.load(options.package)
    shape = package.spec.example_shapes[0]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    expected = package(torch.from_numpy(x)).numpy()
    same = True
    for protocol, ask, url in (("http", ask_http, options.http), ("grpc", ask_grpc, options.grpc)):
        got = ask(url, options.model, x)
        # Bit patterns, not values: -0.0 and NaN payloads count.
        identical = got.shape == expected.shape and np.array_equal(got.view(np.uint32), expected.view(np.uint32))
        print(f"{protocol}: {options.model} {list(x.shape)} -> output {list(got.shape)}, "
              f"{'identical to' if identical else 'DIFFERENT from'} the Python runtime's bits")
        same = same and identical
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
