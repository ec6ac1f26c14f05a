"""aoti-deploy triton-repository: publish a package as a version of a model in a Triton
model repository for this project's `aoti` backend: <repository>/<name>/config.pbtxt and
the version folder, a deploy bundle (signed with --sign-key, verified with --trusted-key
before it is published and by the backend when it loads), put in place atomically."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, List, Optional

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..serve.kubernetes import DEFAULT_IMAGE, DEFAULT_MEMORY
from .common import console, exit_with, option

if TYPE_CHECKING:
    from ..serve.triton_config import TritonTensor

app = typer.Typer(add_completion=False, rich_markup_mode="rich")

# The API's usage error for manifest settings without manifests, in this command's flags.
KUBERNETES_ONLY = ("--image, --replicas, --cpu-limit, --memory, --claim, --kserve and --storage-uri are for the "
                   "manifests: pass --kubernetes DIR")


def _dims(dims: tuple[int, ...], batched: bool) -> str:
    shown = ", ".join(str(d) for d in dims)
    return f"[batch, {shown}]" if batched and dims else ("[batch]" if batched else f"[{shown}]")


def _tensor_dims(tensor: TritonTensor, batched: bool) -> str:
    """The dims requests carry, and the model's own when Triton reshapes between them."""
    if tensor.reshape is None:
        return _dims(tensor.dims, batched)
    return f"{_dims(tensor.dims, batched)}, the model's {_dims(tensor.reshape, batched)}"


def _serve_command(repository: Path) -> str:
    """The tritonserver command line for ``repository``, with this checkout's backend."""
    from ..locate import triton_backends_dir
    from ..serve.triton_install import TritonUnavailableError, tritonserver_binary

    try:
        binary = str(tritonserver_binary())
    except TritonUnavailableError:
        binary = "tritonserver"
    backends, _ = triton_backends_dir()
    return shlex.join([binary, "--model-repository", str(repository), "--backend-directory", str(backends)])


@app.command(
    "triton-repository",
    short_help="Publish a package as a model version in a Triton model repository.",
    help=escape(
        "Write a package (or a deploy bundle) into a Triton Inference Server model repository for this "
        "project's aoti backend: REPOSITORY/NAME/VERSION/ is a deploy bundle (model.pt2, the op libraries it "
        "records, and with --sign-key model.sig), and REPOSITORY/NAME/config.pbtxt declares its inputs and "
        "outputs by the names the package records (e.g. input_ids, logits), else INPUT__0, INPUT__1, ... and "
        "OUTPUT__0, ..., with their types and dims from the package's spec. "
        "A package whose inputs all have one dynamic dim 0, which its outputs share, is batched: "
        "max_batch_size is that dim's largest size, and Triton's dynamic batcher merges requests "
        "(--no-dynamic-batching turns that off); a tensor that is only its batch dim (one score per example) "
        "is declared dims [1] with reshape [], so requests and responses carry it as [batch, 1]. Any other "
        "package is served with max_batch_size 0 and full shapes (-1 for a dynamic size). Packages with "
        "Python-only ops cannot be served (the backend has no Python).\n\n"
        "Versions: each run publishes a new version (the next free number, or --version N), written and "
        "verified in a hidden staging folder and renamed into place whole, so a server polling the repository "
        "(--model-control-mode=poll) never sees a half-written one; --keep-versions K removes older ones, and "
        "--version-policy writes which versions Triton serves (latest:N, all, specific:V1,V2).\n\n"
        "Example:\n\n"
        "  aoti-deploy triton-repository artifacts/model.pt2 --repository artifacts/triton_repository "
        "--name identity_conv\n\n"
        "  aoti-deploy serve --repository artifacts/triton_repository\n\n"
        "Signed, and verified by the backend before it loads (see aoti-deploy bundle --help for the keys):\n\n"
        "  aoti-deploy triton-repository artifacts/model.pt2 --repository repo --sign-key key.pem "
        "--trusted-key key.pub\n\n"
        "With --kubernetes DIR it also writes Kubernetes manifests for the repository into DIR: a Deployment of "
        "tritonserver pods (--replicas, --image: one that holds the aoti backend) with the repository's "
        "PersistentVolumeClaim (--claim) mounted read-only at /models, a ClusterIP Service, and a CPU request = "
        "limit that agrees with the backend's intra-op threads: (CPU limit - 1) / model instances, at least 1 "
        "(--cpu-limit, else instances x threads + 1); --kserve writes a KServe InferenceService instead of the "
        "Deployment and Service (see docs/kubernetes.md):\n\n"
        "  aoti-deploy triton-repository artifacts/model.pt2 --repository models --instances 2 --kubernetes k8s\n\n"
        "Exit codes: 0 written, 2 usage, package, library, key or signing error (nothing is written then)."
    )
)
def triton_repository(
    package: Annotated[
        Path,
        typer.Argument(help="The .pt2 package, or a bundle folder (its model.sig is not kept).", show_default=False),
    ],
    repository: Annotated[
        Path,
        typer.Option(help="The model repository folder (made if missing; other models in it are kept).",
                     show_default=False),
    ],
    name: Annotated[Optional[str], option(
        "The model name, its folder in the repository: letters, digits, '_', '.', '-'. "
        "Default: the package file's stem (model.pt2: model) or the bundle folder's name.",
        show_default=False,
    )] = None,
    version: Annotated[
        Optional[int],
        typer.Option("--version", min=1, show_default=False,
                     help="The version folder to publish (an existing one is swapped for the new one in one step). "
                     "Default: the next free number (1 for a new model)."),
    ] = None,
    keep_versions: Annotated[
        Optional[int],
        typer.Option(min=1, show_default=False,
                     help="Then keep only this many newest versions (the new one included); older ones are removed. "
                     "Default: keep all."),
    ] = None,
    version_policy: Annotated[
        Optional[str],
        typer.Option(show_default=False,
                     help="The config's version_policy: latest:N (the N newest), all, or specific:V1,V2. "
                     "Default: none written (Triton serves the latest)."),
    ] = None,
    instances: Annotated[
        int, typer.Option(min=1, max=2**31 - 1, help="Model instances (instance_group count); each runs requests on its own.")
    ] = 1,
    max_queue_delay_us: Annotated[
        int,
        typer.Option(min=0, help="How long, in microseconds, the dynamic batcher waits for more requests to fill a batch."),
    ] = 100,
    dynamic_batching: Annotated[
        bool,
        typer.Option("--dynamic-batching/--no-dynamic-batching",
                     help="Let Triton merge requests into batches (batched packages only)."),
    ] = True,
    intra_op_threads: Annotated[
        Optional[int],
        typer.Option(min=1, help="Intra-op (OpenMP) threads per instance. Default: the backend's.", show_default=False),
    ] = None,
    op_lib: Annotated[
        Optional[List[Path]],
        typer.Option(
            help="An op library to put in the bundle (repeatable), matched to the package's recorded ones by file "
            "name. Default for libidentity_conv_ops.so: $AOTI_DEPLOY_OPS_LIB, else the one in "
            "$AOTI_DEPLOY_BUILD_DIR or this checkout's build/.",
        ),
    ] = None,
    sign_key: Annotated[
        Optional[Path],
        typer.Option(help="Sign the bundle with this PEM EC private key into model.sig (needs the sign extra).",
                     show_default=False),
    ] = None,
    trusted_key: Annotated[Optional[Path], option(
        "A PEM EC public key: the config names it (as an absolute path) and the backend loads the bundle "
        "only if its signature verifies with it. Without --sign-key the bundle is unsigned and the backend "
        "will refuse it (a warning says so).",
        show_default=False,
    )] = None,
    kubernetes: Annotated[
        Optional[Path],
        typer.Option(help="Also write Kubernetes manifests for the repository into this folder.", show_default=False),
    ] = None,
    image: Annotated[
        str, typer.Option(help="--kubernetes: the tritonserver image; it must hold the aoti backend and libtorch.")
    ] = DEFAULT_IMAGE,
    replicas: Annotated[int, typer.Option(min=1, help="--kubernetes: tritonserver pods.")] = 2,
    cpu_limit: Annotated[
        Optional[int],
        typer.Option(min=1, help="--kubernetes: whole CPUs per pod (request = limit); the backend's threads follow "
                     "it. Default: instances x intra-op threads + 1.", show_default=False),
    ] = None,
    memory: Annotated[str, typer.Option(help="--kubernetes: memory per pod (request = limit).")] = DEFAULT_MEMORY,
    claim: Annotated[
        Optional[str],
        typer.Option(help="--kubernetes: the PersistentVolumeClaim that holds the repository. "
                     "Default: triton-NAME-models.", show_default=False),
    ] = None,
    kserve: Annotated[
        bool, typer.Option("--kserve", help="--kubernetes: a KServe InferenceService instead of the Deployment and Service.")
    ] = False,
    storage_uri: Annotated[
        Optional[str],
        typer.Option(help="--kserve: the repository's storageUri. Default: pvc://CLAIM.", show_default=False),
    ] = None,
) -> None:
    try:
        from ..api import deploy_to_triton
        from ..serve.kubernetes import KubernetesSettings

        settings = KubernetesSettings(image=image, replicas=replicas, memory=memory, claim=claim, kserve=kserve,
                                      storage_uri=storage_uri, cpu_limit=cpu_limit)
        deployment = deploy_to_triton(
            package, repository, name, kubernetes=kubernetes, kubernetes_settings=settings, version=version,
            keep_versions=keep_versions, version_policy=version_policy, instances=instances,
            dynamic_batching=dynamic_batching, max_queue_delay_us=max_queue_delay_us, op_libraries=list(op_lib or []),
            sign_key=sign_key, intra_op_threads=intra_op_threads, trusted_key=trusted_key,
        )
        written, manifests = deployment.model, deployment.manifests
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error, {"kubernetes_settings are for the manifests: pass kubernetes=DIR": KUBERNETES_ONLY})

    config = written.config
    table = Table(title=f"Triton model {written.name}, version {written.version}")
    table.add_column("tensor")
    table.add_column("type")
    table.add_column("dims")
    for tensor in (*config.inputs, *config.outputs):
        table.add_row(tensor.name, tensor.data_type, _tensor_dims(tensor, config.batchable))
    console.print(table)
    key = Path(dict(config.parameters)["trusted_key"]) if trusted_key is not None else None
    rows = [
        ("max_batch_size", str(config.max_batch_size)),
        ("batching", config.batching),
        ("dynamic batching", f"on, max queue delay {config.max_queue_delay_us} us" if config.dynamic_batching
         else "off" if config.batchable else "off (the model is not batched)"),
        ("instances", f"{config.instances} x {config.kind}"),
        ("intra-op threads", str(intra_op_threads) if intra_op_threads is not None else "the backend's default"),
        ("signed", f"yes, with {sign_key}" if written.signed else "no (pass --sign-key KEY.pem to sign)"),
        ("verified by the backend", f"yes, with {key}" if key is not None else "no (pass --trusted-key PUB.pem)"),
        ("versions", ", ".join(map(str, written.versions))
         + (f" (removed {', '.join(map(str, written.removed))})" if written.removed else "")),
        ("version policy", str(config.version_policy) if config.version_policy is not None
         else "none written: Triton serves the latest"),
    ]
    for label, value in rows:
        console.print(f"{label}: {value}")
    console.print(f"wrote {written.config_path}")
    console.print(f"wrote {written.bundle}/ ({', '.join(written.files)})")
    for warning in written.warnings:
        console.print(Text.assemble(("warning: ", "bold yellow"), warning))
    if manifests is not None:
        console.print(f"wrote {', '.join(str(path) for path in deployment.manifest_paths)}")
        for note in manifests.notes:
            console.print(f"  {note}")
        console.print(f"apply them: kubectl apply -f {shlex.quote(str(kubernetes))}")
    console.print("serve it:")
    console.print(f"  {_serve_command(written.repository)}")
    console.print("or start it and check every output bit for bit:")
    console.print(f"  aoti-deploy serve --repository {shlex.quote(str(written.repository))} --model {written.name}")

