"""Serving packages from Triton Inference Server through this project's `aoti` backend:
the config a package's spec gives (triton_config.py), the model repository it becomes
(triton_repository.py) and is read back from (served_models.py), a tritonserver process
(triton_server.py) and the requests that talk to it (triton_client.py), and the check
aoti-deploy serve runs (serve_check.py)."""
