"""Serving packages from Triton Inference Server through this project's `aoti` backend:
the model repository a package becomes (triton_repository.py), and a tritonserver
process with the client calls that check what it serves (triton_server.py)."""
